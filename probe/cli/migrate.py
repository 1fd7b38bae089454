"""`mpsprobe migrate`: bring databases up to this schema version."""
import click


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
    import mpsprobe
    for path in databases:
        before, after = mpsprobe.migrate(path)
        if before == after:
            click.echo(f"{path}: already at schema version {after}")
        else:
            click.echo(f"{path}: schema version {before} -> {after}")
