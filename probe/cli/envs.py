"""`mpsprobe envs`: the cached torch environments that `run --torch` builds."""
import click

from mpsprobe.cli import UserError, output


@click.group()
def envs():
    """See and clean the torch environments cached by `mpsprobe run --torch`.

    They live under the user cache directory (set MPSPROBE_CACHE to move it).

    \b
    Examples:
        mpsprobe envs list
        mpsprobe envs rm torch-2.5.1-py3.11
        mpsprobe envs rm --all
    """


@envs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable list.")
def list_command(as_json):
    """List cached environments: torch version, Python, size, state.

    \b
    Example:
        mpsprobe envs list
    """
    from mpsprobe.envs import envs_dir, list_envs
    found = list_envs()
    click.echo(output.as_json(found) if as_json else "\n".join(output.envs_table(found, envs_dir())))


@envs.command("rm")
@click.argument("names", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every cached environment.")
def rm_command(names, everything):
    """Remove cached environments by name (see `mpsprobe envs list`).

    \b
    Example:
        mpsprobe envs rm torch-2.5.1-py3.11
    """
    from mpsprobe.envs import remove_envs
    if not names and not everything:
        raise UserError("name the environments to remove, or pass --all")
    for name in remove_envs(names, everything):
        click.echo(f"removed {name}")
