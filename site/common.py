"""What the site's plugins share: the served database, links, status classes, rendering.

The plugins in site/plugins/ are thin Datasette hooks: they ask
mpsprobe.db.query and render its answers with these helpers.
"""
import functools
import html
import os
import urllib.parse
from collections import OrderedDict

from datasette.utils.asgi import NotFound, Response
from markupsafe import Markup

from mpsprobe.vocabulary import (PASS, PASS_COLUMN, REASON_KIND, REASON_KINDS, STATUS, STATUSES, SUPPORT,
                                  UNSUPPORTED, is_status)


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


def status_css():
    """The status colours of every page, from the vocabulary: a pair of variables a
    status (--st-NAME, --st-NAME-bg), a class a status that sets --fg and --bg, and
    the colours of good and bad news (--mp-good, --mp-bad) for site.css to use."""
    lines = [":root {"]
    lines += [f"  --st-{s.name}: {s.colour}; --st-{s.name}-bg: {s.background};" for s in STATUS.values()]
    lines += [f"  --mp-good: var(--st-{PASS}); --mp-good-bg: var(--st-{PASS}-bg);",
              f"  --mp-bad: var(--st-{UNSUPPORTED}); --mp-bad-bg: var(--st-{UNSUPPORTED}-bg);", "}"]
    lines += [f".st-{name} {{ --fg: var(--st-{name}); --bg: var(--st-{name}-bg); }}" for name in STATUSES]
    # A grid cell's answer borrows the colours of a status (supported: pass's, partial: fallback's).
    lines += [f".sp-{s.name} {{ --fg: var(--st-{s.colours}); --bg: var(--st-{s.colours}-bg); }}"
              for s in SUPPORT.values()]
    return "\n".join(lines) + "\n"


STATUS_CSS_PATH = "/-/mpsprobe-statuses.css"


async def status_css_page(datasette, request):
    return Response(status_css(), content_type="text/css; charset=utf-8",
                    headers={"cache-control": "max-age=3600"})


def status_symbol(value):
    """The status's symbol from the vocabulary ('?' for an unknown word): shown
    beside every colour, so no colour alone carries the meaning."""
    return STATUS[value].symbol if is_status(value) else "?"


def status_badge(value):
    return Markup(f'<span class="st {status_class(value)}">{status_symbol(value)} '
                  f'{html.escape(str(value))}</span>')


def url(datasette, path, **params):
    # A list is the parameter repeated (?dtype=float16&dtype=float32).
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "", [], ())},
                                   doseq=True)
    # Plain str: Datasette's URL strings make every str method slow (a dir() per call).
    return str(datasette.urls.path(path)) + (f"?{query}" if query else "")


def cases_url(datasette, db, run_id, op_id, dtype):
    return url(datasette, f"/{db.name}/cell_cases", run_id=run_id, op_id=op_id, dtype=dtype)


def op_url(datasette, op_id):
    return str(datasette.urls.path("/-/op/" + urllib.parse.quote(op_id, safe="")))


def run_label(run):
    """How every page names a run, in the grid's words: torch, OS, the device and
    what it is ("mps: Apple M2 Max", "cuda: NVIDIA H200"), then what makes its
    results unlike bare metal's: a virtual machine, Rosetta, a test backend,
    not MPS at all (a CPU or CUDA run), PyTorch's CPU fallback switched on."""
    from mpsprobe.db.query.knowledge import OTHER_DEVICE
    from mpsprobe.db.query.runs import VIRTUAL_MACHINE, evidence_rank, machine_kind
    device = run.get("device") or "?"
    name = run.get("device_name")
    if name and name != device:
        device = f"{device}: {name}"
    parts = [f"torch {run.get('torch_version')}",
             " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x), device]
    if machine_kind(run) == VIRTUAL_MACHINE:
        parts.append(VIRTUAL_MACHINE)
    if run.get("translated") == 1:
        parts.append("under Rosetta (x86 Python)")
    if run.get("backend"):
        parts.append("test backend, not a real device")
    elif evidence_rank(run) == OTHER_DEVICE:
        parts.append("not an MPS answer")      # a CPU or CUDA run is shown as what it is
    if fallback_switched_on(run):
        parts.append("CPU fallback on")
    return " · ".join(p for p in parts if p)


def fallback_switched_on(run):
    """True when the run's workers had PYTORCH_ENABLE_MPS_FALLBACK set (ops without a
    kernel then run on the CPU instead of failing)."""
    import json
    try:
        env = json.loads(run.get("device_env") or "{}")
    except (TypeError, ValueError):
        return False
    return isinstance(env, dict) and str(env.get("PYTORCH_ENABLE_MPS_FALLBACK", "0")) not in ("", "0")


def fmt_ms(value):
    """A time in ms to three significant figures; "—" where none was measured."""
    return "—" if value is None else f"{value:.3g}"


def template_vars():
    """What every page's templates may use."""
    return {"status_class": status_class, "status_symbol": status_symbol, "fmt_ms": fmt_ms,
            "statuses": STATUSES, "status_info": STATUS, "declared_class": status_class(PASS),
            "pass_column": PASS_COLUMN,
            "reason_kinds": [REASON_KIND[k] for k in REASON_KINDS]}


async def render(datasette, request, template, context, data=None):
    """The page as HTML, or `data` as JSON when the path ends in .json (every
    custom page has its JSON: the same answer the HTML shows)."""
    if data is not None and request.path.endswith(".json"):
        return Response.json(data, default=str)
    body = await datasette.render_template(template, dict(template_vars(), **context),
                                           request=request)
    return Response.html(body)


# A filter longer than this is refused: no op name comes near it, and SQLite's
# LIKE gives up on a pattern of tens of thousands of characters.
MAX_FILTER = 500


def too_long(text):
    return len(text or "") > MAX_FILTER


async def refuse(datasette, request, what, text):
    """A 400 page (or JSON) that says in one line why a query string was refused."""
    message = f"{what} is {len(text)} characters long; at most {MAX_FILTER} are accepted"
    if request.path.endswith(".json"):
        return Response.json({"ok": False, "refused": message}, status=400)
    body = await datasette.render_template("mpsprobe_refused.html", dict(
        template_vars(), title="Refused", message=message), request=request)
    return Response.html(body, status=400)


def reason_label(kind):
    """How a page says a reason kind: its label from the vocabulary, else the word."""
    return REASON_KIND[kind].label if kind in REASON_KIND else (kind or "")


# Pages of an immutable database never change: the last few are kept rendered.
_PAGES = OrderedDict()
CACHED_PAGES = 32


def cached(page):
    """Keep a page's 200 answers while the database is served immutable (keyed
    by file, its modification time and the full URL); a live database is never cached."""
    @functools.wraps(page)
    async def wrapped(datasette, request):
        db = get_database(datasette)
        if db.is_mutable or not db.path:
            return await page(datasette, request)
        key = (id(datasette), db.path, os.path.getmtime(db.path), request.path,
               request.query_string)
        hit = _PAGES.get(key)
        if hit is None:
            response = await page(datasette, request)
            if response.status != 200:
                return response
            hit = _PAGES[key] = (response.body, response.content_type)
            while len(_PAGES) > CACHED_PAGES:
                _PAGES.popitem(last=False)
        _PAGES.move_to_end(key)
        return Response(hit[0], content_type=hit[1])
    return wrapped
