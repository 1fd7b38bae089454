"""`mpsprobe serve`: the database as a searchable website, here."""
import asyncio

import click


@click.command()
@click.argument("db_path", default="mpsprobe.db", type=click.Path(dir_okay=False))
@click.option("-h", "--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 exposes the site to the network.")
@click.option("-p", "--port", default=8001, show_default=True, type=int,
              help="Port to listen on (0: any free port).")
@click.option("--live", is_flag=True,
              help="Open read-only instead of immutable, to follow a run that is still writing.")
@click.option("--time-limit", "time_limit_ms", default=2000, show_default=True, type=int,
              help="Milliseconds any one SQL query may take (for SQL visitors write: "
                   "a wall-clock deadline per request).")
@click.option("-o", "--open", "open_browser", is_flag=True, help="Open the compat grid in a browser.")
def serve(db_path, host, port, live, time_limit_ms, open_browser):
    """Browse a database: compat grid, matrix, op history, compare runs, search.

    The database is served read-only (immutable unless --live); the site never
    writes to it. Every page and query is also available as JSON and CSV.

    \b
    Example:
        mpsprobe serve mpsprobe.db
        mpsprobe serve mpsprobe.db --port 8080 --open
    """
    import uvicorn

    from mpsprobe.site import check_database, make_datasette

    check_database(db_path)
    ds = make_datasette(db_path, live=live or None, time_limit_ms=time_limit_ms)
    asyncio.run(ds.invoke_startup())
    config = uvicorn.Config(ds.app(), host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    original_startup = server.startup

    async def startup(sockets=None):
        await original_startup(sockets=sockets)
        bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        where = f"http://{host}:{bound}/-/grid"   # the README and the home page start here too
        click.echo(f"serving {db_path} read-only at {where}  (Ctrl-C to stop)", err=True)
        if open_browser:
            click.launch(where)
    server.startup = startup
    server.run()
