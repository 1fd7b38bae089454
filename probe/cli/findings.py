"""`mpsprobe findings`: a run beside what PyTorch declares for its device."""
import click

from mpsprobe.cli import output


@click.command()
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="SQLite database to read.")
@click.option("--run", "run_id", default=None, help="Run id or prefix (default: the run mpsprobe answers from).")
@click.option("--against", type=click.Choice(["mps", "cuda"]), default=None,
              help="Declaration to compare with (default: the run's device).")
@click.option("--limit", default=20, show_default=True, type=int, help="Lines shown per kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def findings(db_path, run_id, against, limit, as_json):
    """Compare a run with what PyTorch declares for its device.

    Lists stale expected failures (declared failing, yet passing), undeclared
    failures (declared to work, yet failing), ops without an MPS kernel that
    pass natively, and the rate at which measured support agrees with the
    declaration. Record declarations first with `mpsprobe declared`.

    \b
    Examples:
        mpsprobe findings --db mps.db
        mpsprobe findings --db cuda.db --run 3f2a --json
    """
    import mpsprobe
    report = mpsprobe.findings(db_path, run_id, against)
    if as_json:
        click.echo(output.as_json(report))
    else:
        click.echo("\n".join(output.findings(report, limit)))
