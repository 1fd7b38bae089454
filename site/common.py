"""What the site's plugins share: the served database, links, status classes, rendering.

The plugins in site/plugins/ are thin Datasette hooks: they ask
mpsprobe.db.query and render its answers with these helpers.
"""
import html
import urllib.parse

from datasette.utils.asgi import NotFound, Response
from markupsafe import Markup

from mpsprobe.vocabulary import PASS, STATUS, STATUSES, is_status


def get_database(datasette):
    """The mpsprobe database being served (named by the plugin configuration)."""
    conf = datasette.plugin_config("mpsprobe") or {}
    name = conf.get("database")
    if name and name in datasette.databases:
        return datasette.databases[name]
    for db in datasette.databases.values():
        if db.name != "_internal" and not db.is_memory:
            return db
    raise NotFound("no database is being served")


async def ask(db, question, *args, **kwargs):
    """Run one query-layer function, `question(conn, *args, **kwargs)`, on the database."""
    return await db.execute_fn(lambda conn: question(conn, *args, **kwargs))


def status_class(value):
    """The CSS class of a status: only a known status word becomes a class, so a
    status string from a merged or hand-edited database can never break out of
    the attribute (it is shown escaped as text instead)."""
    return f"st-{value}" if is_status(value) else "st-unknown"


def status_badge(value):
    return Markup(f'<span class="st {status_class(value)}">{html.escape(str(value))}</span>')


def url(datasette, path, **params):
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})
    # Plain str: Datasette's URL strings make every str method slow (a dir() per call).
    return str(datasette.urls.path(path)) + (f"?{query}" if query else "")


def cases_url(datasette, db, run_id, op_id, dtype):
    return url(datasette, f"/{db.name}/cell_cases", run_id=run_id, op_id=op_id, dtype=dtype)


def op_url(datasette, op_id):
    return str(datasette.urls.path("/-/op/" + urllib.parse.quote(op_id, safe="")))


def run_label(run):
    os_part = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    device = run.get("device") or "?"
    if run.get("device_name") and run["device_name"] != device:
        device = f"{device} ({run['device_name']})"
    return f"torch {run.get('torch_version')} · {os_part} · {device}"


def template_vars():
    """What every page's templates may use."""
    return {"status_class": status_class, "statuses": STATUSES, "status_info": STATUS,
            "declared_class": status_class(PASS)}


async def render(datasette, request, template, context):
    body = await datasette.render_template(template, dict(template_vars(), **context),
                                           request=request)
    return Response.html(body)
