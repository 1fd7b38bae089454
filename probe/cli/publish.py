"""`mpsprobe publish`: host the site with `datasette publish` (or `datasette package`)."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import click


@click.command()
@click.argument("db_path", type=click.Path(dir_okay=False))
@click.argument("platform")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Print the datasette command instead of running it.")
def publish(db_path, platform, extra, dry_run):
    """Host the site: `datasette publish PLATFORM` (or `datasette package`) with the site's files.

    PLATFORM is any `datasette publish` target (cloudrun, heroku, or one a
    plugin adds, like vercel or fly) or `package` for a local Docker image.
    Options after `--` go to datasette unchanged.

    \b
    Example:
        mpsprobe publish mpsprobe.db cloudrun -- --service mpsprobe
        mpsprobe publish mpsprobe.db package --dry-run
    """
    from mpsprobe.site import check_database, database_name, datasette_args, site_metadata

    check_database(db_path)
    datasette = shutil.which("datasette") or "datasette"
    folder = tempfile.mkdtemp(prefix="mpsprobe-publish-")
    metadata_path = os.path.join(folder, "metadata.json")
    with open(metadata_path, "w") as f:
        json.dump(site_metadata(db_path), f, indent=2)
    verb = ["package"] if platform == "package" else ["publish", platform]
    command = [datasette, *verb, db_path, *datasette_args(metadata_path), *extra]
    if dry_run:
        click.echo(shlex.join(command))
        return
    click.echo(f"publishing {db_path} as database {database_name(db_path)!r}", err=True)
    sys.exit(subprocess.call(command))

