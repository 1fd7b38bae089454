"""The site's "check ops" page: paste the op list `mpsprobe check --export` wrote, get the answers.

Accepts that JSON, a JSON list of aten op names, or one name a line; answers
against a chosen run (default: the newest MPS run, else the newest) with the
same rules as `mpsprobe check` (mpsprobe.db.lookup), so it needs mpsprobe
installed next to Datasette; without it the page says so.
"""
import json

from datasette import hookimpl
from datasette.utils.asgi import NotFound, Response

PATH = "/-/check-ops"

TEMPLATE = """{% extends "base.html" %}
{% block title %}Check ops — mpsprobe{% endblock %}
{% block content %}
<h1>Check a model's aten ops</h1>
<p>Paste the JSON that <code>mpsprobe check MODEL --export ops.json</code> writes,
a JSON list of aten op names, or one name a line.</p>
<form action="{{ action }}" method="get">
<p><textarea name="ops" rows="8" style="width: 100%; font-family: monospace">{{ ops_text }}</textarea></p>
<p><label>Answer from run <select name="run">
{% for r in runs %}<option value="{{ r.id }}"{% if run and r.id == run.id %} selected{% endif %}>{{ r.label }}</option>{% endfor %}
</select></label>
<label>dtype (for bare names) <input name="dtype" value="{{ dtype }}" size="9"></label>
<input type="submit" value="Check"></p>
</form>
{% if error %}<p class="message-error">{{ error }}</p>{% endif %}
{% if report %}
<h2>{{ report.model }} {{ report.mode }}, {{ report.dtype }}: {{ report.distinct_ops }} distinct aten ops</h2>
<p>{% for name, symbol, label in classes %}{% if report.counts[name] %}<strong>{{ symbol }} {{ report.counts[name] }}</strong> {{ label }} &nbsp; {% endif %}{% endfor %}</p>
{% if report.run.backend %}<p class="message-warning">This run used a test backend: not a real device measurement.</p>{% endif %}
<table class="rows-and-columns">
<thead><tr><th></th><th>aten op</th><th>dtype</th><th>answer</th><th>calls</th><th>where</th><th>probe ops</th><th>target / CPU ms</th></tr></thead>
<tbody>
{% for o in report.ops %}<tr>
<td>{{ symbols[o["class"]] }}</td><td><code>{{ o.aten_op }}</code></td><td>{{ o.dtype or "" }}</td>
<td>{% if o.status %}<span class="st {{ status_class(o.status) }}">{{ o.status }}</span> {% endif %}{{ o.note }}{% if o.message %}<br><small>{{ o.message[:200] }}</small>{% endif %}</td>
<td>{{ o.count }}</td><td>{{ o.places[:3]|join(", ") }}</td>
<td>{% for v in o.probe_ops[:4] %}<a href="{{ op_base }}{{ v|urlencode }}">{{ v }}</a> {% endfor %}</td>
<td>{% if o.target_ms is not none %}{{ "%.3g"|format(o.target_ms) }} / {{ "%.3g"|format(o.cpu_ms) }}{% endif %}</td>
</tr>{% endfor %}
</tbody></table>
{% endif %}
{% endblock %}"""


def _database(datasette):
    conf = datasette.plugin_config("mpsprobe") or {}
    if conf.get("database") in datasette.databases:
        return datasette.databases[conf["database"]]
    for db in datasette.databases.values():
        if db.name != "_internal" and not db.is_memory:
            return db
    raise NotFound("no database is being served")


def _label(run):
    where = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    return (f"{run['device']} · torch {run.get('torch_version')} · {where} · "
            f"{(run.get('started') or '')[:10]} · {run['id'][:8]}")


def _parse(text, dtype):
    text = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = text  # one name a line, or comma-separated
    if isinstance(data, list):
        data = {"ops": data, "dtype": dtype}
    elif isinstance(data, dict) and not data.get("dtype"):
        data = dict(data, dtype=dtype)
    return data


async def check_ops_page(datasette, request):
    db = _database(datasette)
    params = request.args
    ops_text = params.get("ops") or ""
    dtype = params.get("dtype") or "float32"
    context = {"action": datasette.urls.path(PATH), "ops_text": ops_text, "dtype": dtype,
               "runs": [], "run": None, "report": None, "error": None,
               "op_base": datasette.urls.path("/-/op/")}
    try:
        from mpsprobe.modelcheck import report as check
        from mpsprobe.db.query import blame as lookup
    except ImportError:
        context["error"] = "This page needs mpsprobe installed next to Datasette (pip install mpsprobe)."
        check = None
    if check is not None:
        context["classes"] = check.CLASSES
        context["symbols"] = check.SYMBOL

        def answer(conn):
            runs = [r for r in lookup.runs(conn) if r["n_results"]]
            if not runs:
                raise lookup.LookupError_("the database holds no probe results")
            run = lookup.choose_run(conn, run_id=params.get("run") or None)
            report = None
            if ops_text.strip():
                model_ops = check.ops_from_json(_parse(ops_text, dtype))
                report = check.answer(conn, model_ops, run).to_json()
            return runs, run, report
        try:
            runs, run, report = await db.execute_fn(answer)
            context.update(runs=[dict(r, label=_label(r)) for r in runs], run=run, report=report)
        except (lookup.LookupError_, check.CheckError) as e:
            context["error"] = str(e)
    template = datasette.jinja_env.from_string(TEMPLATE)
    body = await datasette.render_template(template, context, request=request)
    return Response.html(body)


@hookimpl
def register_routes():
    return [(f"^{PATH}$", check_ops_page)]
