"""`mpsprobe verify`: check bundles before they are merged."""
import sys

import click

from mpsprobe.cli import output


@click.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--against", "against", default=None, type=click.Path(dir_okay=False),
              help="A database to compare the results with (its declarations and other machines' runs).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable verdict per bundle.")
def verify(bundles, against, as_json):
    """Check bundles: content hash, consistency, vocabulary, timings, provenance.

    A bundle that fails any check is refused, with every reason; exit status 1.
    Results that contradict MPS's rules (a float64 pass on MPS) or, with
    --against, both the declared status and every other machine, are listed
    for review without refusing the bundle.

    \b
    Example:
        mpsprobe verify mine.bundle.json.gz --against fleet.db
    """
    import mpsprobe
    verdicts = [mpsprobe.verify(path, against=against) for path in bundles]
    if as_json:
        click.echo(output.as_json([v.to_json() for v in verdicts]))
    else:
        click.echo("\n".join(output.verdicts(verdicts)))
    sys.exit(0 if all(v.ok for v in verdicts) else 1)
