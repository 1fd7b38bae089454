"""`mpsprobe merge` and `mpsprobe migrate`: combine databases; bring one up to date."""
import json

import click

from mpsprobe.cli import UserError


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Database to merge into (created if missing; its runs are kept).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
def merge(sources, output, as_json):
    """Combine runs from many databases into one, without duplicates.

    Runs are keyed by their stable ids, so merging the same database twice
    adds nothing, and a run resumed since the last merge brings only its new
    results. Shard runs (`mpsprobe run --shard I/N`) stay separate runs and
    are grouped by the `sweeps` view. Sources are only read; one with an older
    schema is migrated in a temporary copy, one with a newer schema is refused.

    \b
    Examples:
        mpsprobe merge m1.db m3.db -o all.db
        mpsprobe merge shard-1.db shard-2.db shard-3.db -o sweep.db
    """
    from mpsprobe.db.merge import MergeError, merge as merge_dbs
    try:
        reports = merge_dbs(sources, output)
    except MergeError as e:
        raise UserError(str(e)) from None
    if as_json:
        click.echo(json.dumps([{
            "source": r.path, "schema_version": r.schema_version, "runs_added": r.runs_added,
            "runs_updated": r.runs_updated, "rows_added": r.rows_added} for r in reports],
            indent=2))
        return
    for r in reports:
        migrated = f" (schema {r.schema_version}, migrated in a copy)" if r.migrated else ""
        click.echo(f"{r.path}{migrated}: {r.runs_added} runs added, {r.runs_updated} updated, "
                   f"{r.results_added} results added")
    click.echo(f"merged into {output}")


@click.command()
@click.argument("databases", nargs=-1, required=True, type=click.Path(dir_okay=False))
def migrate(databases):
    """Bring databases written by an older mpsprobe up to this schema version.

    Each migration runs in one transaction: if it fails, the database is left
    exactly as it was. Writing commands (`run`, `merge`) migrate on their own;
    this is for databases that are only read (the site, `check`).

    \b
    Example:
        mpsprobe migrate old.db
    """
    from mpsprobe.db.schema import DatabaseError, migrate as migrate_db
    for path in databases:
        try:
            before, after = migrate_db(path)
        except DatabaseError as e:
            raise UserError(str(e)) from None
        if before == after:
            click.echo(f"{path}: already at schema version {after}")
        else:
            click.echo(f"{path}: schema version {before} -> {after}")
