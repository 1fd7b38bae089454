"""`mpsprobe coverage`: which MPS kernels the catalogue reaches, measured from a database."""
import click

from mpsprobe.cli import output


@click.command()
@click.option("--db", "db_path", default=None, type=click.Path(dir_okay=False),
              help="Database whose recorded cases count (default: none, so nothing is reached).")
@click.option("--run", "run_ids", multiple=True,
              help="Run id or prefix to count (repeatable; default: every sweep of the installed torch).")
@click.option("--wheel", default=None, type=click.Path(dir_okay=False),
              help="Read the kernels from this torch wheel instead of the installed torch.")
@click.option("--limit", default=40, show_default=True, type=int, help="Functions left shown.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON, every function with it.")
def coverage(db_path, run_ids, wheel, limit, as_json):
    """Count the MPS kernels the catalogue reaches, and say why the rest are left.

    The kernels are native_functions.yaml's functions with their own MPS key
    plus the MPS kernels torch registers from Python. A kernel is reached when
    a recorded case dispatched it, itself or through a function whose
    structured delegate it is. Off a Mac the cases record the CPU's dispatch:
    the kernels only MPS calls are answered from the public calls that reach
    them, and the output says which evidence it used.

    \b
    Example:
        mpsprobe run --device cpu --samples 1 --db cpu.db
        mpsprobe coverage --db cpu.db
    """
    import mpsprobe
    report = mpsprobe.coverage(db_path, run_ids, wheel)
    if as_json:
        click.echo(output.as_json(report))
    else:
        click.echo("\n".join(output.coverage(report, limit)))
