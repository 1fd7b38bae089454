"""`mpsprobe publish`: host the site with `datasette publish` (or `datasette package`)."""
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
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Keep the files the command names (metadata, the mpsprobe wheel) in this folder; "
                   "by default they live in a temporary folder, removed afterwards.")
def publish(db_path, platform, extra, dry_run, out_dir):
    """Host the site: `datasette publish PLATFORM` (or `datasette package`) with the site's files.

    PLATFORM is any `datasette publish` target (cloudrun, heroku, or one a
    plugin adds, like vercel or fly) or `package` for a local Docker image.
    The deploy installs this checkout's mpsprobe (a wheel built here, with the
    site's requirements only: no torch), which the site's plugins import.
    Options after `--` go to datasette unchanged.

    \b
    Example:
        mpsprobe publish mpsprobe.db cloudrun -- --service mpsprobe
        mpsprobe publish mpsprobe.db package --dry-run --out deploy
    """
    from mpsprobe.site import check_database, database_name
    from mpsprobe.site.deploy import publish_command

    check_database(db_path)
    datasette = shutil.which("datasette") or "datasette"
    verb = ["package"] if platform == "package" else ["publish", platform]
    with tempfile.TemporaryDirectory(prefix="mpsprobe-publish-") as scratch:
        folder = out_dir or scratch
        os.makedirs(folder, exist_ok=True)
        command = publish_command(datasette, verb, db_path, folder, extra)
        if dry_run:
            click.echo(shlex.join(command))
            if not out_dir:
                click.echo("(dry run: the files it names were in a temporary folder, now removed; "
                           "--out DIR keeps them)", err=True)
            return
        click.echo(f"publishing {db_path} as database {database_name(db_path)!r}", err=True)
        code = subprocess.call(command)
    sys.exit(code)
