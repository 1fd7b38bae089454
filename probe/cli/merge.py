"""`mpsprobe merge`: combine databases from many machines, shards and torch versions."""
import click

from mpsprobe.cli import output as output_module


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Database to merge into (created if missing; its runs are kept).")
@click.option("--unverified", is_flag=True,
              help="Merge bundles that fail `mpsprobe verify` too (they are refused by default).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def merge(sources, output, unverified, as_json):
    """Combine runs from many databases and bundles into one, without duplicates.

    Runs are keyed by their stable ids, so merging the same database twice
    adds nothing, and a run resumed since the last merge brings only its new
    results. Shard runs (`mpsprobe run --shard I/N`) stay separate runs and
    are grouped by the `sweeps` view. Sources are only read; one with an older
    schema is migrated in a temporary copy, one with a newer schema is refused.
    A bundle (`mpsprobe submit`) is verified first and refused, with the
    reason, unless it passes.

    \b
    Examples:
        mpsprobe merge m1.db m3.db -o all.db
        mpsprobe merge shard-1.db shard-2.db shard-3.db -o sweep.db
        mpsprobe merge fleet.db contributed/*.bundle.json.gz -o fleet.db
    """
    import mpsprobe
    reports = mpsprobe.merge(sources, output, unverified=unverified)
    click.echo(output_module.merge_json(reports) if as_json
               else "\n".join(output_module.merge_reports(reports, output)))
