"""`python -m mpsprobe …`: the same as the `mpsprobe` command."""
from mpsprobe.cli import cli

if __name__ == "__main__":
    cli(prog_name="mpsprobe")
