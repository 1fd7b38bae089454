"""`mpsprobe submit`: a run as a bundle to contribute (its rows, provenance and a content hash)."""
import click

from mpsprobe.cli import output


@click.command()
@click.option("--db", "db_path", default="mpsprobe.db", show_default=True,
              type=click.Path(dir_okay=False), help="Database holding the run.")
@click.option("--run", "run_id", default=None, help="Run id or prefix (default: the run mpsprobe answers from).")
@click.option("-o", "--output", "out_path", default=None, type=click.Path(dir_okay=False),
              help="Bundle file to write (.json, or .json.gz compressed; default: RUN_ID.bundle.json.gz).")
def submit(db_path, run_id, out_path):
    """Write a finished run as a bundle to attach to a pull request or upload.

    The bundle holds the run's results, cases and ops, where it was measured
    (chip, GPU cores, memory, macOS build, bare metal or virtual machine,
    torch, the exact command) and a content hash over them; `mpsprobe verify`
    checks it and `mpsprobe merge` takes it.

    \b
    Example:
        mpsprobe submit --db mine.db -o mine.bundle.json.gz
    """
    import mpsprobe
    body = mpsprobe.submit(db_path, out_path or "{run}.bundle.json.gz", run_id=run_id)
    out_path = out_path or f"{body['run']['id'][:12]}.bundle.json.gz"
    click.echo("\n".join(output.submitted(body, out_path)))
