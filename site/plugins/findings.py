"""The findings page, /-/findings: a run beside what PyTorch declares for its device.

The same report as `mpsprobe findings` (mpsprobe.db.query.findings), rendered.
?run=ID picks the run (default: the run picker's), ?against=mps|cuda the declaration.
Only like is compared with like: a CPU run against MPS lists nothing, and says why.
"""
from datasette import hookimpl
from datasette.utils.asgi import NotFound

from mpsprobe.db.query import findings, runs as runs_q
from mpsprobe.site.common import ask, get_database, render

PAGE = """{% extends "base.html" %}
{% block title %}Findings — mpsprobe{% endblock %}
{% block content %}
<h1>Declared vs measured</h1>
<form class="mp-form" action="" method="get">
<label>Run <select name="run">{% for r in runs %}<option value="{{ r.id }}"{% if run and r.id == run.id %} selected{% endif %}>torch {{ r.torch_version }} · {{ r.device }} · {{ (r.started or '')[:16] }}</option>{% endfor %}</select></label>
<label>against <select name="against">{% for d in ('', 'mps', 'cuda') %}<option value="{{ d }}"{% if d == against %} selected{% endif %}>{{ d or "the run's device" }}</option>{% endfor %}</select></label>
<button type="submit">Compare</button></form>
{% if problem %}<p class="mp-empty">{{ problem }}</p>{% else %}
<p>Run {{ run.id[:12] }} ({{ run.device }}, torch {{ run.torch_version }}) against the {{ device }}
declarations of torch {{ version }} (from the {{ origin }}).
Agreement of measured support with the declaration:
<strong>{{ rate }}</strong> ({{ agree }} of {{ decided }} pairs; {{ undetermined }} undetermined).</p>
{% for kind, title, why, rows in sections %}
<h2>{{ title }} ({{ rows|length }})</h2><p>{{ why }}</p>
{% if rows %}<table class="mp-plain"><thead><tr><th>op</th><th>dtype</th><th>declared</th><th>measured</th><th>why</th></tr></thead><tbody>
{% for f in rows %}<tr><th><a href="{{ op_base }}{{ f.op_id|urlencode }}">{{ f.op_id }}</a></th><td>{{ f.dtype }}</td><td class="{{ status_class(f.declared) }}">{{ status_symbol(f.declared) }} {{ f.declared }}</td><td class="{{ status_class(f.measured) }}">{{ status_symbol(f.measured) }} {{ f.measured }}</td><td>{{ f.explanation }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
{% endfor %}
<h2>Support disagreements ({{ disagreements|length }})</h2>
{% if disagreements %}<table class="mp-plain"><thead><tr><th>op</th><th>dtype</th><th>declared</th><th>measured</th><th>source</th></tr></thead><tbody>
{% for f in disagreements %}<tr><th><a href="{{ op_base }}{{ f.op_id|urlencode }}">{{ f.op_id }}</a></th><td>{{ f.dtype }}</td><td class="{{ status_class(f.declared) }}">{{ status_symbol(f.declared) }} {{ f.declared }}</td><td class="{{ status_class(f.measured) }}">{{ status_symbol(f.measured) }} {{ f.measured }}</td><td>{{ f.source }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
{% endif %}
{% endblock %}"""


async def findings_page(datasette, request):
    db = get_database(datasette)
    runs = await ask(db, runs_q.list_runs)
    wanted = request.args.get("run") or None
    against = request.args.get("against") or ""
    if wanted and wanted not in {r["id"] for r in runs}:
        raise NotFound(f"no run {wanted}")
    context = {"runs": runs, "run": None, "against": against, "problem": None,
               "op_base": datasette.urls.path("/-/op/")}
    report = None
    try:
        report = await ask(db, findings.report, wanted, against or None)
    except runs_q.RunNotFound as e:
        context["problem"] = str(e)
    except findings.FindingsError as e:
        context["problem"] = e.web
        context["run"] = next((r for r in runs if r["id"] == wanted), None)
    else:
        agreement = report["agreement"]
        device = report["declared"]["device"]
        context.update(
            run=report["run"], device=device, version=report["declared"]["torch_version"],
            origin=report["declared"]["from"],
            agree=agreement["agree"], decided=agreement["agree"] + agreement["disagree"],
            undetermined=agreement["undetermined"],
            rate="n/a" if agreement["rate"] is None else f"{agreement['rate']:.1%}",
            disagreements=agreement["disagreements"],
            sections=[(k.name, k.title, k.why, [f for f in report["findings"] if f["kind"] == k.name])
                      for k in findings.KINDS if k.name != "composite_passes" or device == "mps"])
    template = datasette.jinja_env.from_string(PAGE)
    return await render(datasette, request, template, context,
                        data=report or {"problem": context["problem"]})


@hookimpl
def register_routes():
    return [(r"^/-/findings(\.json)?$", findings_page)]
