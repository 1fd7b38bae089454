"""Speed pages: /-/speed (crossovers of op ladders, model batch sweeps, compiled against
eager), /-/claims (the guides' claims and what the database holds for each), and the op
page's speed section.

Thin hooks over mpsprobe.db.query.speed; charts from mpsprobe.site.charts.
"""
from datasette import hookimpl
from datasette.utils.asgi import Response

from mpsprobe.claims import CLAIMS
from mpsprobe.db.query import speed as speed_q
from mpsprobe.speed import compiled_text, compiled_verdict, speedup_text   # claims only where the interval excludes 1
from mpsprobe.site.charts import CPU_COLOUR, TARGET_COLOUR, svg_chart, _label
from mpsprobe.site.common import ask, get_database, run_label


def crossover_text(row, x_name="size"):
    if row.get("always"):
        return "target wins at every rung"
    point = row.get("crossover") if "crossover" in row else row.get("crossover_batch")
    if point is None:
        return "target is the CPU" if str(row.get("device", "")).startswith("cpu") else "target never shown faster"
    return f"target wins from {row.get('by') or x_name} {_label(point)}"


def _where(row):
    """The run a figure comes from, as every page names runs (a virtual machine says so)."""
    return f"{run_label(row)} · {(row.get('started') or '')[:10]}"


def _groups(rows, key):
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in key), []).append(r)
    return list(groups.values())


def ladder_charts(rows):
    """One chart (SVG and its table) per (run, dtype, pass) of one op's ladder rows."""
    charts = []
    for group in _groups(rows, ("run_id", "dtype", "pass_name")):
        first = group[0]
        by = first.get("by") or ("batch" if first.get("batch") is not None else "size")
        x = [(r[by] or r["size"]) for r in group]
        svg = svg_chart([("CPU", CPU_COLOUR, list(zip(x, (r["cpu_ms"] for r in group)))),
                         (first["device"], TARGET_COLOUR, list(zip(x, (r["target_ms"] for r in group))))],
                        x_label="elements" if by == "size" else "batch", y_label="ms per call (median)",
                        marker=first.get("crossover"), marker_label="crossover",
                        title=f"{first['op']} {first['pass_name']}, {first['dtype']}")
        charts.append({"title": f"{first['pass_name']}, {first['dtype']}", "where": _where(first), "svg": svg,
                       "crossover": crossover_text(first), "cpu_threads": first.get("cpu_threads"),
                       "rows": group, "by": by})
    return charts


def model_charts(sweeps):
    """One chart (throughput against batch) per model sweep of speed_q.model_sweeps()."""
    charts = []
    for sweep in sweeps:
        group, batches = sweep["rows"], [r["batch"] for r in sweep["rows"]]
        title = f"{sweep['model']} {sweep['mode']}, {sweep['dtype']}"
        svg = svg_chart([("CPU", CPU_COLOUR, list(zip(batches, (r["cpu_per_s"] for r in group)))),
                         (sweep["device"], TARGET_COLOUR, list(zip(batches, (r["target_per_s"] for r in group))))],
                        x_label="batch", y_label="samples per second",
                        marker=sweep.get("crossover_batch"), marker_label="crossover", title=title)
        charts.append({"title": title, "where": _where(sweep), "svg": svg, "model": sweep["model"],
                       "mode": sweep["mode"], "crossover": crossover_text(sweep, "batch"),
                       "best": max((r["speedup"] for r in group if r["speedup"]), default=None),
                       "cpu_threads": sweep.get("cpu_threads"), "rows": group})
    return charts


async def op_section(datasette, db, op_id):
    """The op page's speed section as HTML: a chart and table per ladder of `op_id` ("" when none)."""
    charts = ladder_charts(await ask(db, speed_q.speed_curve, op_id))
    if not charts:
        return ""
    return await datasette.jinja_env.from_string(SECTION).render_async(charts=charts, fmt=fmt)


SECTION = """{% for c in charts %}<div class="mp-speed">
<h3>{{ c.title }} <small>{{ c.where }}</small></h3>
<p>{{ c.crossover }}{% if c.cpu_threads %} · CPU: {{ c.cpu_threads }} thread{{ 's' if c.cpu_threads != 1 }}{% endif %}</p>
{{ c.svg|safe }}
<details><summary>numbers</summary><table class="mp-plain"><thead><tr>{% if c.by %}<th>rung</th><th>{{ c.by }}</th><th>CPU ms</th><th>target ms</th><th>speedup</th><th>GB/s</th><th>GFLOP/s</th><th>note</th>{% else %}<th>batch</th><th>CPU ms</th><th>target ms</th><th>speedup</th><th>CPU samples/s</th><th>target samples/s</th><th>note</th>{% endif %}</tr></thead><tbody>
{% for r in c.rows %}<tr>{% if c.by %}<td>{{ r.rung }}</td><td>{{ r[c.by] }}</td>{% else %}<td>{{ r.batch }}</td>{% endif %}<td>{{ fmt(r.cpu_ms) }}</td><td>{{ fmt(r.target_ms) }}</td><td>{{ fmt(r.speedup) }}</td>{% if c.by %}<td>{{ fmt(r.gbps) }}</td><td>{{ fmt(r.gflops) }}</td>{% else %}<td>{{ fmt(r.cpu_per_s) }}</td><td>{{ fmt(r.target_per_s) }}</td>{% endif %}<td>{{ r.note or '' }}</td></tr>
{% endfor %}</tbody></table></details></div>
{% endfor %}"""

SPEED_PAGE = """{% extends "base.html" %}
{% block title %}Speed — mpsprobe{% endblock %}
{% block content %}
<h1>Speed: where the target beats the CPU</h1>
<p>Each op is timed over a ladder of sizes (or of batches at a real model's layer shapes) on the CPU,
all its threads, and on the target; the crossover is the size from which the target wins at every larger one.
The per-case timing of <code>mpsprobe run</code> uses OpInfo's tiny samples: it measures kernel-launch
latency, not the op. <a href="{{ claims_url }}">The guides' claims, measured</a>.</p>
{% if not crossovers and not models and not compiled %}<p class="mp-empty">No speed ladders or batch sweeps in this database:
<code>mpsprobe bench --device mps</code>, <code>mpsprobe check MODEL --run --batch 1,2,4,8,16,32,64</code>.</p>{% endif %}
{% for run in crossovers %}<h2>Op ladders · {{ run.where }}</h2>
<table class="mp-plain"><thead><tr><th>op</th><th>family</th><th>dtype</th><th>pass</th><th>crossover</th><th>best speedup</th><th>at</th><th>largest measured</th></tr></thead><tbody>
{% for c in run.rows %}<tr><td><a href="{{ op_base }}{{ c.op|urlencode }}">{{ c.op }}</a></td><td>{{ c.family }}</td><td>{{ c.dtype }}</td><td>{{ c.pass_name }}</td><td>{{ c.text }}</td><td>{{ c.best }}</td><td>{{ c.by }} {{ c.best_at if c.best_at is not none else '' }}</td><td>{{ c.largest if c.largest is not none else '—' }}</td></tr>
{% endfor %}</tbody></table>{% endfor %}
{% if models %}<h2>Model batch sweeps</h2>{% set charts = models %}""" + SECTION + """{% endif %}
{% for run in compiled %}<h2>Compiled vs eager · {{ run.where }}</h2>
<p>Each op's forward through <code>torch.compile</code> against the eager op on the same target, at the same
input (eager ms over compiled ms): faster or slower only where the interval excludes 1. The first call includes compiling.</p>
<table class="mp-plain mp-sortable mp-compiled-speed"><thead><tr><th>op</th><th>dtype</th><th>first call ms (compiling)</th><th>eager ms</th><th>compiled ms</th><th>compiled vs eager</th></tr></thead><tbody>
{% for c in run.rows %}<tr><td><a href="{{ op_base }}{{ c.op_id|urlencode }}">{{ c.op_id }}</a></td><td>{{ c.dtype }}</td><td>{{ fmt(c.compile_ms) }}</td><td>{{ fmt(c.eager_ms) }}</td><td>{{ fmt(c.target_ms) }}</td><td class="mp-speed-{{ (c.verdict or 'none')|replace(' ', '-') }}">{{ c.text }}</td></tr>
{% endfor %}</tbody></table>{% endfor %}
{% endblock %}"""

CLAIMS_PAGE = """{% extends "base.html" %}
{% block title %}Claims — mpsprobe{% endblock %}
{% block content %}
<h1>The guides' claims, measured</h1>
<p>Each claim, the measurement that confirms or refutes it, and what this database holds for it.
Replace DEVICE with mps (a Mac) or cuda; the same command measures either.</p>
<table class="mp-plain"><thead><tr><th>claim</th><th>measurement</th><th>measured here</th><th>command</th></tr></thead><tbody>
{% for c in claims %}<tr><td>{{ c.claim }}</td><td>{{ c.measure }}</td><td>{% if c.found %}{% for f in c.found %}{{ f }}<br>{% endfor %}{% else %}to be measured{% endif %}</td><td><code>{{ c.command }}</code></td></tr>
{% endfor %}</tbody></table>
{% endblock %}"""


def threads(n):
    return "? threads" if not n else f"{n} thread{'s' if n != 1 else ''}"


def fmt(value):
    if value is None:
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


async def _render(datasette, request, template, context, data=None):
    if data is not None and request.path.endswith(".json"):   # every page has its JSON
        return Response.json(data, default=str)
    body = await datasette.render_template(datasette.jinja_env.from_string(template),
                                           dict(context, fmt=fmt), request=request)
    return Response.html(body)


async def speed_page(datasette, request):
    db = get_database(datasette)
    crossovers = [{"where": _where(group[0]) + " · CPU " + threads(group[0].get('cpu_threads')),
                   "rows": [dict(c, text=crossover_text(c), best=speedup_text(c)) for c in group]}
                  for group in _groups(await ask(db, speed_q.crossovers), ("run_id",))]
    models = model_charts(await ask(db, speed_q.model_sweeps))
    compiled = [{"where": _where(group[0]),
                 "rows": [dict(c, verdict=compiled_verdict(c), text=compiled_text(c)) for c in group]}
                for group in _groups(await ask(db, speed_q.compiled_speeds), ("run_id",))]
    return await _render(datasette, request, SPEED_PAGE, {
        "crossovers": crossovers, "models": models, "compiled": compiled,
        "op_base": datasette.urls.path("/-/op/"), "claims_url": datasette.urls.path("/-/claims")},
        data={"crossovers": crossovers, "compiled": compiled,
              "models": [{k: v for k, v in m.items() if k != "svg"} for m in models]})


def claim_findings(claim, models, crossovers):
    """What the database holds for one claim: lines of text, [] when nothing yet."""
    found = [f"{c['where']}: {c['crossover']}; best {fmt(c['best'])}x" for c in models
             if c["model"] == claim.get("model") and c["mode"] == claim.get("mode")]
    found += [f"{_where(c)}: {c['pass_name']} {crossover_text(c)}; best {speedup_text(c)} "
              f"at {c['by']} {c['best_at']}" for c in crossovers
              if c["op"] == claim.get("op") and c["dtype"] == claim.get("dtype", c["dtype"])]
    return found


async def claims_page(datasette, request):
    db = get_database(datasette)
    models = model_charts(await ask(db, speed_q.model_sweeps))
    crossovers = await ask(db, speed_q.crossovers)
    claims = [dict(c, found=claim_findings(c, models, crossovers)) for c in CLAIMS]
    return await _render(datasette, request, CLAIMS_PAGE, {"claims": claims}, data={"claims": claims})


@hookimpl
def register_routes():
    return [(r"^/-/speed(\.json)?$", speed_page), (r"^/-/claims(\.json)?$", claims_page)]
