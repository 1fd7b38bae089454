"""Speed pages: /-/speed (crossovers of op ladders, model batch sweeps), /-/claims (the
guides' claims and the measurements that test them), and the speed section of the op page.

Self-contained like the rest of site/plugins (plain SQL on the speed tables of
db/migrations/m006_speed.py; nothing imported from mpsprobe), so it works
under `datasette publish`.

Charts are inline SVG drawn by `svg_chart`, a small function of this module's
own rather than a plotting library: matplotlib is not a dependency of
mpsprobe (nor installed where a published site runs), a JavaScript library
from a CDN would leave an offline or archived page blank, and the charts
need only log axes, a few lines and one marker. Every chart comes with the
same numbers as a table beneath it.
"""
import html
import math

from datasette import hookimpl
from datasette.utils.asgi import NotFound, Response

CPU_COLOUR, TARGET_COLOUR, MARK_COLOUR = "#57606a", "#0969da", "#cf222e"

# The claims guides and threads make about MPS speed, and the measurement that tests each.
# README.md's "The guides' claims" table holds the same rows (a test keeps them in step).
CLAIMS = (
    {"id": "resnet50-inference",
     "claim": "MPS runs ResNet-50 inference 3-5x faster than the CPU (M1 Max); 1.8-4.6x by batch size (M1 Air)",
     "measure": "whole-model inference step per batch size, CPU (all threads) against the target",
     "command": "mpsprobe check benchmarks/models/resnet50.py --run --device DEVICE "
                "--batch 1,2,4,8,16,32,64 --db speed.db",
     "model": "resnet50", "mode": "inference"},
    {"id": "mnist-training",
     "claim": "MNIST-scale training is about 6x faster on MPS (some 2022 nightlies: slower)",
     "measure": "whole-model training step (forward, backward, SGD) of pytorch/examples' MNIST network "
                "per batch size",
     "command": "mpsprobe check benchmarks/models/mnist_cnn.py --run --train --device DEVICE "
                "--batch 1,8,32,64,128,256 --db speed.db",
     "model": "mnist_cnn", "mode": "training"},
    {"id": "small-batch-crossover",
     "claim": "Batches under 8-16 lose to the CPU",
     "measure": "crossover batch of a BERT-base-shaped encoder (and of ResNet-50 above, and of the layer "
                "ladders at ResNet-50, BERT-base and ViT-B/16 shapes)",
     "command": "mpsprobe check benchmarks/models/bert_base.py --run --device DEVICE --batch 1,2,4,8,16,32,64 "
                "--db speed.db; mpsprobe bench --families conv,linear,attention,norm --device DEVICE --db speed.db",
     "model": "bert_base", "mode": "inference"},
    {"id": "batchnorm3d",
     "claim": "BatchNorm3d is slow on MPS: 0.77x the CPU in a 3-D ResNet (pytorch#178492)",
     "measure": "speed ladder of r3d_18.bn (BatchNorm3d at R3D-18's stem shape), forward and backward",
     "command": "mpsprobe bench --ops r3d_18.bn,r3d_18.stem,r3d_18.layer1.conv --device DEVICE --db speed.db",
     "op": "r3d_18.bn"},
    {"id": "fft",
     "claim": "FFTs are fast on MPS (or fall back to the CPU)",
     "measure": "speed ladders of fft.rfft and fft.fft2; the op sweep's fallback status for fft ops",
     "command": "mpsprobe bench --families fft --device DEVICE --db speed.db; "
                "mpsprobe run --ops 'fft.*' --device DEVICE --db speed.db",
     "op": "fft.rfft"},
    {"id": "float64",
     "claim": "MPS has no float64",
     "measure": "the op sweep's float64 statuses (unsupported on MPS), and a float64 ladder elsewhere",
     "command": "mpsprobe run --dtypes float64 --device DEVICE --db speed.db; "
                "mpsprobe bench --ops add,matmul --dtype float64 --device DEVICE --db speed.db",
     "op": "matmul", "dtype": "float64"},
)


# ---------------------------------------------------------------------------- charts

def _ticks(lo, hi, values=()):
    """Tick positions on a log axis: the data's own values when up to 8, else the powers of
    ten in range (the range's ends when fewer than two)."""
    distinct = sorted(set(values))
    if 0 < len(distinct) <= 8:
        return distinct
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    powers = [10.0 ** e for e in range(first, last + 1) if lo <= 10.0 ** e <= hi]
    return powers if len(powers) >= 2 else [lo, hi]


def _label(value):
    if value >= 1e4 or value < 1e-2:
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if value >= 1 and value == int(value):
        return str(int(value))
    return f"{value:.3g}"


def svg_chart(series, *, x_label, y_label, marker=None, marker_label="", width=460, height=260,
              title=""):
    """An SVG line chart with log x and log y axes, or "" when there is nothing to draw.

    series: [(name, colour, [(x, y), ...])], points with a y of None (or
    not positive) left out; marker: an x where a dashed vertical line is drawn
    with `marker_label` (the crossover). Text is escaped.
    """
    points = [(x, y) for _, _, pts in series for x, y in pts if x and y and x > 0 and y > 0]
    if not points:
        return ""
    left, right, top, bottom = 64, 16, 24, 44
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    if x_lo == x_hi:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    if y_lo == y_hi:
        y_lo, y_hi = y_lo / 2, y_hi * 2
    lx, ly = math.log10(x_lo), math.log10(y_lo)
    sx = (width - left - right) / (math.log10(x_hi) - lx)
    sy = (height - top - bottom) / (math.log10(y_hi) - ly)

    def px(x):
        return left + (math.log10(x) - lx) * sx

    def py(y):
        return height - bottom - (math.log10(y) - ly) * sy

    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="mp-chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title or y_label)}" '
           f'font-family="sans-serif" font-size="11">']
    if title:
        out.append(f'<text x="{left}" y="14" font-weight="600">{e(title)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               f'fill="none" stroke="#d0d7de"/>')
    for t in _ticks(x_lo, x_hi, xs):
        out.append(f'<line x1="{px(t):.1f}" y1="{height - bottom}" x2="{px(t):.1f}" y2="{height - bottom + 4}" '
                   f'stroke="#57606a"/><text x="{px(t):.1f}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">{_label(t)}</text>')
    for t in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{left - 4}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" '
                   f'stroke="#eaeef2"/><text x="{left - 6}" y="{py(t) + 4:.1f}" '
                   f'text-anchor="end">{_label(t)}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'{e(x_label)}</text>')
    out.append(f'<text transform="translate(14 {(top + height - bottom) / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{e(y_label)}</text>')
    if marker and x_lo <= marker <= x_hi:
        out.append(f'<line class="mp-crossover" x1="{px(marker):.1f}" y1="{top}" x2="{px(marker):.1f}" '
                   f'y2="{height - bottom}" stroke="{MARK_COLOUR}" stroke-dasharray="4 3"/>'
                   f'<text x="{px(marker) + 4:.1f}" y="{top + 12}" fill="{MARK_COLOUR}">{e(marker_label)}</text>')
    legend_x = width - right - sum(22 + 7 * len(name) for name, _, _ in series)
    for name, colour, pts in series:
        kept = sorted((x, y) for x, y in pts if x and y and x > 0 and y > 0)
        if not kept:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in kept)
        out.append(f'<polyline class="mp-series" points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in kept]
        out.append(f'<rect x="{legend_x}" y="8" width="8" height="8" fill="{colour}"/>'
                   f'<text x="{legend_x + 11}" y="16" fill="{colour}">{e(name)}</text>')
        legend_x += 22 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------- data

RUN = "r.device, r.device_name, r.torch_version, r.os_name, r.os_version, r.chip, r.started"

SQL_OP_SPEED = f"""
SELECT s.*, c.crossover, c.always, c.by, {RUN} FROM speed s JOIN runs r ON r.id = s.run_id
LEFT JOIN speed_crossovers c ON c.run_id = s.run_id AND c.op = s.op AND c.dtype = s.dtype
  AND c.pass_name = s.pass_name
WHERE s.op = :op ORDER BY r.started DESC, s.run_id, s.dtype, s.pass_name, s.size"""

SQL_CROSSOVERS = f"""
SELECT c.*, s.cpu_threads, {RUN} FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
LEFT JOIN (SELECT run_id, max(cpu_threads) AS cpu_threads FROM speed GROUP BY run_id) s ON s.run_id = c.run_id
ORDER BY r.started DESC, c.run_id, c.family, c.op, c.dtype, c.pass_name"""

SQL_MODELS = f"""
SELECT m.*, x.crossover_batch, x.always, {RUN} FROM model_speed m JOIN runs r ON r.id = m.run_id
LEFT JOIN model_crossovers x ON x.run_id = m.run_id AND x.model = m.model AND x.mode = m.mode
  AND x.dtype = m.dtype
ORDER BY r.started DESC, m.run_id, m.model, m.mode, m.dtype, m.batch"""


def crossover_text(row, x_name="size"):
    if row.get("always"):
        return "target wins at every rung"
    point = row.get("crossover") if "crossover" in row else row.get("crossover_batch")
    if point is None:
        return "target never wins" if not str(row.get("device", "")).startswith("cpu") else "target is the CPU"
    return f"target wins from {row.get('by') or x_name} {_label(point)}"


def _where(row):
    where = " ".join(x for x in (row.get("os_name"), row.get("os_version")) if x)
    return (f"{row['device']} ({row.get('device_name') or '?'}) · torch {row.get('torch_version')} · "
            f"{where} · {(row.get('started') or '')[:10]}")


def _groups(rows, key):
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in key), []).append(r)
    return groups


def ladder_charts(rows):
    """One chart (SVG and its table) per (run, dtype, pass) of one op's ladder rows."""
    charts = []
    for (_, dtype, pass_name), group in _groups(rows, ("run_id", "dtype", "pass_name")).items():
        first = group[0]
        by = first.get("by") or ("batch" if first.get("batch") is not None else "size")
        x = [(r[by] or r["size"]) for r in group]
        svg = svg_chart([("CPU", CPU_COLOUR, list(zip(x, (r["cpu_ms"] for r in group)))),
                         (first["device"], TARGET_COLOUR, list(zip(x, (r["target_ms"] for r in group))))],
                        x_label="elements" if by == "size" else "batch", y_label="ms per call (median)",
                        marker=first.get("crossover"), marker_label="crossover",
                        title=f"{first['op']} {pass_name}, {dtype}")
        charts.append({"title": f"{pass_name}, {dtype}", "where": _where(first), "svg": svg,
                       "crossover": crossover_text(first), "cpu_threads": first.get("cpu_threads"),
                       "rows": group, "by": by})
    return charts


def model_charts(rows):
    charts = []
    for _, group in _groups(rows, ("run_id", "model", "mode", "dtype")).items():
        first = group[0]
        batches = [r["batch"] for r in group]
        svg = svg_chart([("CPU", CPU_COLOUR, list(zip(batches, (r["cpu_per_s"] for r in group)))),
                         (first["device"], TARGET_COLOUR, list(zip(batches, (r["target_per_s"] for r in group))))],
                        x_label="batch", y_label="samples per second",
                        marker=first.get("crossover_batch"), marker_label="crossover",
                        title=f"{first['model']} {first['mode']}, {first['dtype']}")
        charts.append({"title": f"{first['model']} {first['mode']}, {first['dtype']}", "where": _where(first),
                       "svg": svg, "crossover": crossover_text(first, "batch"),
                       "cpu_threads": first.get("cpu_threads"), "rows": group})
    return charts


async def _has_speed(db):
    return "speed" in await db.table_names()


async def op_section(datasette, db, op_id):
    """The op page's speed section as HTML: a chart and table per ladder of `op_id` ("" when none)."""
    if not await _has_speed(db):
        return ""
    charts = ladder_charts([dict(r) for r in await db.execute(SQL_OP_SPEED, {"op": op_id})])
    if not charts:
        return ""
    return await datasette.jinja_env.from_string(SECTION).render_async(charts=charts, fmt=fmt)


# ---------------------------------------------------------------------------- pages

SECTION = """{% for c in charts %}<div class="mp-speed">
<h3>{{ c.title }} <small>{{ c.where }}</small></h3>
<p>{{ c.crossover }}{% if c.cpu_threads %} · CPU: {{ c.cpu_threads }} threads{% endif %}</p>
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
{% if not crossovers and not models %}<p class="mp-empty">No speed ladders or batch sweeps in this database:
<code>mpsprobe bench --device mps</code>, <code>mpsprobe check MODEL --run --batch 1,2,4,8,16,32,64</code>.</p>{% endif %}
{% for run in crossovers %}<h2>Op ladders · {{ run.where }}</h2>
<table class="mp-plain"><thead><tr><th>op</th><th>family</th><th>dtype</th><th>pass</th><th>crossover</th><th>best speedup</th><th>at</th><th>largest measured</th></tr></thead><tbody>
{% for c in run.rows %}<tr><td><a href="{{ op_base }}{{ c.op|urlencode }}">{{ c.op }}</a></td><td>{{ c.family }}</td><td>{{ c.dtype }}</td><td>{{ c.pass_name }}</td><td>{{ c.text }}</td><td>{{ fmt(c.best_speedup) }}</td><td>{{ c.by }} {{ c.best_at if c.best_at is not none else '' }}</td><td>{{ c.largest if c.largest is not none else '—' }}</td></tr>
{% endfor %}</tbody></table>{% endfor %}
{% if models %}<h2>Model batch sweeps</h2>{% set charts = models %}""" + SECTION + """{% endif %}
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


def fmt(value):
    if value is None:
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


async def _render(datasette, request, template, context):
    body = await datasette.render_template(datasette.jinja_env.from_string(template),
                                           dict(context, fmt=fmt), request=request)
    return Response.html(body)


def _database(datasette):
    conf = datasette.plugin_config("mpsprobe") or {}
    if conf.get("database") in datasette.databases:
        return datasette.databases[conf["database"]]
    for db in datasette.databases.values():
        if db.name != "_internal" and not db.is_memory:
            return db
    raise NotFound("no database is being served")


async def speed_page(datasette, request):
    db = _database(datasette)
    crossovers, models = [], []
    if await _has_speed(db):
        rows = [dict(r) for r in await db.execute(SQL_CROSSOVERS)]
        for _, group in _groups(rows, ("run_id",)).items():
            crossovers.append({"where": _where(group[0]) + f" · CPU {group[0].get('cpu_threads') or '?'} threads",
                               "rows": [dict(c, text=crossover_text(c)) for c in group]})
        models = model_charts([dict(r) for r in await db.execute(SQL_MODELS)])
    return await _render(datasette, request, SPEED_PAGE, {
        "crossovers": crossovers, "models": models, "op_base": datasette.urls.path("/-/op/"),
        "claims_url": datasette.urls.path("/-/claims")})


def claim_findings(claim, model_rows, crossover_rows):
    """What the database holds for one claim: lines of text, [] when nothing yet."""
    found = []
    if claim.get("model"):
        for c in model_charts([r for r in model_rows if r["model"] == claim["model"]
                               and r["mode"] == claim["mode"]]):
            best = max((r["speedup"] for r in c["rows"] if r["speedup"]), default=None)
            found.append(f"{c['where']}: {c['crossover']}; best {fmt(best)}x")
    if claim.get("op"):
        for c in crossover_rows:
            if c["op"] == claim["op"] and c["dtype"] == claim.get("dtype", c["dtype"]):
                found.append(f"{_where(c)}: {c['pass_name']} {crossover_text(c)}; "
                             f"best {fmt(c['best_speedup'])}x at {c['by']} {c['best_at']}")
    return found


async def claims_page(datasette, request):
    db = _database(datasette)
    model_rows, crossover_rows = [], []
    if await _has_speed(db):
        model_rows = [dict(r) for r in await db.execute(SQL_MODELS)]
        crossover_rows = [dict(r) for r in await db.execute(SQL_CROSSOVERS)]
    claims = [dict(c, found=claim_findings(c, model_rows, crossover_rows)) for c in CLAIMS]
    return await _render(datasette, request, CLAIMS_PAGE, {"claims": claims})


@hookimpl
def register_routes():
    return [(r"^/-/speed$", speed_page), (r"^/-/claims$", claims_page)]
