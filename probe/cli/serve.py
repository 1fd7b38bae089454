"""`mpsprobe serve` and `mpsprobe publish`: the database as a searchable website."""
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import click

from mpsprobe.cli import UserError


def _check_database(db_path):
    """Refuse, in one line, a file the site cannot show; never writes to it."""
    from mpsprobe.db.schema import DatabaseError, open_db

    if not os.path.exists(db_path):
        raise UserError(f"{db_path} does not exist: record results first with "
                        f"`mpsprobe run --db {db_path}`")
    try:
        open_db(db_path, readonly=True).conn.close()
    except DatabaseError as e:
        raise UserError(str(e)) from None


@click.command()
@click.argument("db_path", default="mpsprobe.db", type=click.Path(dir_okay=False))
@click.option("-h", "--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 exposes the site to the network.")
@click.option("-p", "--port", default=8001, show_default=True, type=int,
              help="Port to listen on (0: any free port).")
@click.option("--live", is_flag=True,
              help="Open read-only instead of immutable, to follow a run that is still writing.")
@click.option("--time-limit", "time_limit_ms", default=2000, show_default=True, type=int,
              help="Milliseconds any one SQL query may take.")
@click.option("-o", "--open", "open_browser", is_flag=True, help="Open the matrix in a browser.")
def serve(db_path, host, port, live, time_limit_ms, open_browser):
    """Browse a database: compatibility matrix, op history, compare runs, search.

    The database is served read-only (immutable unless --live); the site never
    writes to it. Every page and query is also available as JSON and CSV.

    \b
    Example:
        mpsprobe serve mpsprobe.db
        mpsprobe serve mpsprobe.db --port 8080 --open
    """
    import uvicorn

    from mpsprobe.site import make_datasette

    _check_database(db_path)
    ds = make_datasette(db_path, live=live or None, time_limit_ms=time_limit_ms)
    asyncio.run(ds.invoke_startup())
    config = uvicorn.Config(ds.app(), host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    original_startup = server.startup

    async def startup(sockets=None):
        await original_startup(sockets=sockets)
        bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        where = f"http://{host}:{bound}/-/matrix"
        click.echo(f"serving {db_path} read-only at {where}  (Ctrl-C to stop)", err=True)
        if open_browser:
            click.launch(where)
    server.startup = startup
    server.run()


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
    from mpsprobe.site import database_name, datasette_args, site_metadata

    _check_database(db_path)
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

