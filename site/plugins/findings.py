"""The findings page, /-/findings: a run beside what PyTorch declares for its device.

Self-contained like the rest of site/plugins (it imports nothing from
mpsprobe, so it works under `datasette publish`); the same rules as
`mpsprobe findings`, in SQL. ?run=ID picks the run (default: the newest on a
device that declares something), ?against=mps|cuda the declaration.
"""
import html

from datasette import hookimpl
from datasette.utils.asgi import NotFound, Response

MEASURED_SUPPORTED = ("pass", "mismatch", "skip")
MEASURED_UNSUPPORTED = ("unsupported", "fallback")
DECLARED_FAILING = ("unsupported", "mismatch", "error")
FAILING = ("fallback", "mismatch", "unsupported", "error", "crash", "timeout")

KINDS = (
    ("stale_xfail", "Declared failing, yet passes",
     "An expected failure that no longer holds: worth a pull request upstream."),
    ("undeclared_failure", "Declared fine, yet fails",
     "A failure PyTorch does not list: worth an issue upstream."),
    ("composite_passes", "No MPS kernel, yet passes natively",
     "The aten function is composite and decomposes into ops MPS has kernels for."),
)


def _in(values):
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


SQL_PAIRS = f"""
WITH m AS (SELECT op_id, dtype, status, n_cases FROM op_dtype_status WHERE run_id = :run),
     d AS (SELECT op_id, dtype, status, source, note FROM declared
           WHERE torch_version = :version AND device = :device)
SELECT m.op_id, m.dtype, m.status AS measured, m.n_cases, d.status AS declared, d.source,
  CASE WHEN d.status IN {_in(DECLARED_FAILING)} AND m.status = 'pass' THEN 'stale_xfail'
       WHEN d.status = 'pass' AND m.status IN {_in(FAILING)} THEN 'undeclared_failure' END AS kind,
  CASE WHEN m.status IN {_in(MEASURED_SUPPORTED)} THEN 1
       WHEN m.status IN {_in(MEASURED_UNSUPPORTED)} THEN 0 END AS measured_support,
  CASE WHEN d.status IN ('pass', 'mismatch') THEN 1 WHEN d.status = 'unsupported' THEN 0 END
    AS declared_support
FROM m JOIN d USING (op_id, dtype) ORDER BY m.op_id, m.dtype"""

SQL_COMPOSITE = """
WITH k AS (SELECT name, max(has_mps) AS has_mps, group_concat(DISTINCT composite) AS composite
           FROM declared_kernels WHERE torch_version = :version GROUP BY name)
SELECT r.op_id, r.dtype, o.aten_name, k.composite
FROM op_dtype_status AS r JOIN ops AS o ON o.id = r.op_id JOIN k ON k.name = o.aten_name
WHERE r.run_id = :run AND r.status = 'pass' AND k.has_mps = 0 AND k.composite IS NOT NULL
ORDER BY r.op_id, r.dtype"""

PAGE = """{% extends "base.html" %}
{% block title %}Findings — mpsprobe{% endblock %}
{% block content %}
<h1>Declared vs measured</h1>
<form action="" method="get">
<label>Run <select name="run">{% for r in runs %}<option value="{{ r.id }}"{% if run and r.id == run.id %} selected{% endif %}>torch {{ r.torch_version }} · {{ r.device }} · {{ (r.started or '')[:16] }}</option>{% endfor %}</select></label>
<label>against <select name="against">{% for d in ('', 'mps', 'cuda') %}<option value="{{ d }}"{% if d == against %} selected{% endif %}>{{ d or "the run's device" }}</option>{% endfor %}</select></label>
<button type="submit">Compare</button></form>
{% if problem %}<p class="mp-empty">{{ problem }}</p>{% else %}
<p>Run {{ run.id[:12] }} ({{ run.device }}, torch {{ run.torch_version }}) against the {{ device }}
declarations of torch {{ version }}.
Agreement of measured support with the declaration:
<strong>{{ rate }}</strong> ({{ agree }} of {{ decided }} pairs; {{ undetermined }} undetermined).</p>
{% for kind, title, why, rows in sections %}
<h2>{{ title }} ({{ rows|length }})</h2><p>{{ why }}</p>
{% if rows %}<table class="mp-plain"><thead><tr><th>op</th><th>dtype</th><th>declared</th><th>measured</th><th>why</th></tr></thead><tbody>
{% for f in rows %}<tr><th>{{ f.op_id }}</th><td>{{ f.dtype }}</td><td class="{{ status_class(f.declared) }}">{{ f.declared }}</td><td class="{{ status_class(f.measured) }}">{{ f.measured }}</td><td>{{ f.explanation }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
{% endfor %}
<h2>Support disagreements ({{ disagreements|length }})</h2>
{% if disagreements %}<table class="mp-plain"><thead><tr><th>op</th><th>dtype</th><th>declared</th><th>measured</th><th>source</th></tr></thead><tbody>
{% for f in disagreements %}<tr><th>{{ f.op_id }}</th><td>{{ f.dtype }}</td><td class="{{ status_class(f.declared) }}">{{ f.declared }}</td><td class="{{ status_class(f.measured) }}">{{ f.measured }}</td><td>{{ f.source }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
{% endif %}
{% endblock %}"""


def _database(datasette):
    conf = datasette.plugin_config("mpsprobe") or {}
    name = conf.get("database")
    if name and name in datasette.databases:
        return datasette.databases[name]
    for db in datasette.databases.values():
        if db.name != "_internal" and not db.is_memory:
            return db
    raise NotFound("no database is being served")


def declared_device(run_device):
    device = (run_device or "").split(":", 1)[0]
    return {"mps": "mps", "fake-mps": "mps", "cuda": "cuda"}.get(device)


def match_version(known, version):
    """Exact, else the same public version ("2.13.0+cpu" matches "2.13.0")."""
    if version in known:
        return version
    public = (version or "").split("+", 1)[0]
    return next((v for v in known if v.split("+", 1)[0] == public), None)


async def _rows(db, sql, params=None):
    return [dict(r) for r in (await db.execute(sql, params or {})).rows]


async def report(db, run, device):
    """The same figures as `mpsprobe findings`, or (None, why not)."""
    tables = set(await db.table_names())
    if "declared" not in tables:
        return None, "No declarations recorded: run `mpsprobe declared` on this database."
    known = [r["torch_version"] for r in await _rows(
        db, "SELECT DISTINCT torch_version FROM declared WHERE device = :d", {"d": device})]
    version = match_version(known, run["torch_version"])
    if version is None:
        return None, f"No {device} declarations for torch {run['torch_version']}."
    pairs = await _rows(db, SQL_PAIRS, {"run": run["id"], "version": version, "device": device})
    found = {"stale_xfail": [], "undeclared_failure": [], "composite_passes": []}
    for p in pairs:
        if p["kind"] == "stale_xfail":
            p["explanation"] = f"declared {p['declared']} by {p['source']}, yet all {p['n_cases']} cases pass"
        elif p["kind"] == "undeclared_failure":
            p["explanation"] = f"declared to work ({p['source']}), yet {p['measured']}"
        if p["kind"]:
            found[p["kind"]].append(p)
    kernel_versions = [r["torch_version"] for r in await _rows(
        db, "SELECT DISTINCT torch_version FROM declared_kernels")] if "declared_kernels" in tables else []
    kversion = match_version(kernel_versions, run["torch_version"])
    if device == "mps" and kversion:
        by_pair = {(p["op_id"], p["dtype"]): p for p in pairs}
        for c in await _rows(db, SQL_COMPOSITE, {"run": run["id"], "version": kversion}):
            p = by_pair.get((c["op_id"], c["dtype"]))
            if p:
                found["composite_passes"].append(dict(p, explanation=(
                    f"aten::{c['aten_name']} has no MPS kernel ({c['composite']}), yet it passes natively")))
    decided = [p for p in pairs if p["measured_support"] is not None and p["declared_support"] is not None]
    agree = sum(p["measured_support"] == p["declared_support"] for p in decided)
    return {
        "version": version, "found": found, "agree": agree, "decided": len(decided),
        "undetermined": len(pairs) - len(decided),
        "rate": agree / len(decided) if decided else None,
        "disagreements": [p for p in decided if p["measured_support"] != p["declared_support"]],
    }, None


async def findings_page(datasette, request):
    db = _database(datasette)
    if "runs" not in await db.table_names():
        raise NotFound("no runs in this database")
    runs = await _rows(db, "SELECT id, device, torch_version, started FROM runs ORDER BY started DESC")
    wanted = request.args.get("run")
    against = request.args.get("against") or ""
    if wanted:
        run = next((r for r in runs if r["id"] == wanted), None)
        if run is None:
            raise NotFound(f"no run {html.escape(wanted)}")
    else:
        run = next((r for r in runs if declared_device(r["device"])), runs[0] if runs else None)
    context = {"runs": runs, "run": run, "against": against, "problem": None}
    device = against or (declared_device(run["device"]) if run else None)
    if run is None:
        context["problem"] = "No runs in this database."
    elif device is None:
        context["problem"] = f"Run {run['id'][:12]} is on {run['device']}, which declares nothing: choose a declaration."
    else:
        result, problem = await report(db, run, device)
        context["problem"] = problem
        if result:
            context.update(
                device=device, version=result["version"], agree=result["agree"],
                decided=result["decided"], undetermined=result["undetermined"],
                rate="n/a" if result["rate"] is None else f"{result['rate']:.1%}",
                disagreements=result["disagreements"],
                sections=[(k, t, w, result["found"][k]) for k, t, w in KINDS
                          if k != "composite_passes" or device == "mps"])
    template = datasette.jinja_env.from_string(PAGE)
    return Response.html(await datasette.render_template(template, context, request=request))


@hookimpl
def register_routes():
    return [(r"^/-/findings$", findings_page)]
