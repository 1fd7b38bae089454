"""The site's "check ops" page: paste the op list `mpsprobe check --export` wrote, get the answers.

Accepts that JSON, a JSON list of aten op names, or one name a line; answers
from the best evidence for MPS, as `mpsprobe check` does (modelcheck.declared.answering:
a measured MPS run, else what PyTorch declares), or from a chosen run, with the
same rules and report (mpsprobe.modelcheck.report); each answer names its evidence.
"""
import json

from datasette import hookimpl

from mpsprobe.db.query import blame, runs as runs_q
from mpsprobe.errors import MpsprobeError
from mpsprobe.modelcheck import report as check
from mpsprobe.modelcheck.declared import answering
from mpsprobe.site.common import get_database, render
from mpsprobe.vocabulary import ANSWER, ANSWERS

PATH = "/-/check-ops"

TEMPLATE = """{% extends "base.html" %}
{% block title %}Check ops — mpsprobe{% endblock %}
{% block content %}
<h1>Check a model's aten ops</h1>
<p>Paste the JSON that <code>mpsprobe check MODEL --export ops.json</code> writes,
a JSON list of aten op names, or one name a line.</p>
<form class="mp-form" action="{{ action }}" method="get">
<p><textarea name="ops" rows="8" style="width: 100%; font-family: monospace" aria-label="ops">{{ ops_text }}</textarea></p>
<p><label>Answer from <select name="run">
<option value="">the best evidence for MPS</option>
{% for r in runs %}<option value="{{ r.id }}"{% if chosen and r.id == chosen %} selected{% endif %}>run {{ r.label }}</option>{% endfor %}
</select></label>
<label>dtype (for bare names) <input name="dtype" value="{{ dtype }}" size="9"></label>
<input type="submit" value="Check"></p>
</form>
{% if problem %}<p class="message-error">{{ problem }}</p>{% endif %}
{% if report %}
<h2>{% if report.model == pasted %}Your list{% else %}{{ report.model }} {{ report.mode }}{% endif %}, {{ report.dtype }}: {{ report.distinct_ops }} distinct aten op{{ 's' if report.distinct_ops != 1 }}</h2>
{% if resolved %}<p class="mp-subtitle">{% for name, found in resolved.items() %}<code>{{ name }}</code> read as {% for f in found %}<code>{{ f }}</code>{% if not loop.last %}, {% endif %}{% endfor %}. {% endfor %}</p>{% endif %}
<p>{% for a in answers %}{% if report.counts[a.name] %}<strong>{{ a.symbol }} {{ report.counts[a.name] }}</strong> {{ a.label }} &nbsp; {% endif %}{% endfor %}</p>
<p class="mp-subtitle">{{ report.basis }}</p>
{% if report.run.backend %}<p class="message-warning">This run used a test backend: not a real device measurement.</p>{% endif %}
<table class="rows-and-columns">
<thead><tr><th></th><th>aten op</th><th>dtype</th><th>answer</th><th>calls</th><th>where</th><th>probe ops</th><th>target / CPU ms</th></tr></thead>
<tbody>
{% for o in report.ops %}<tr>
<td>{{ symbols[o["class"]] }}</td><td><code>{{ o.aten_op }}</code></td><td>{{ o.dtype or "" }}</td>
<td>{% if o.status %}<span class="st {{ status_class(o.status) }}">{{ status_symbol(o.status) }} {{ o.status }}</span> {% endif %}{{ o.note }}<br><small>{{ o.source }}</small>{% if o.message %}<br><small>{{ o.message[:200] }}</small>{% endif %}{% for s in o.suggestions %}<br><small>→ {{ s.text }} (<a href="{{ s.source }}">source</a>)</small>{% endfor %}</td>
<td>{{ o.count }}</td><td>{{ o.places[:3]|join(", ") }}{% if o.lines %}<br><small>{{ o.lines[:3]|join(", ") }}</small>{% endif %}</td>
<td>{% for v in o.probe_ops[:4] %}<a href="{{ op_base }}{{ v|urlencode }}">{{ v }}</a> {% endfor %}</td>
<td>{% if o.target_ms is not none %}{{ "%.3g"|format(o.target_ms) }} / {{ "%.3g"|format(o.cpu_ms) }}{% endif %}</td>
</tr>{% endfor %}
</tbody></table>
{% endif %}
{% endblock %}"""


def _label(run):
    where = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    return (f"{run['device']} · torch {run.get('torch_version')} · {where} · "
            f"{(run.get('started') or '')[:10]} · {run['id'][:8]}")


PASTED = "pasted"


def _basis(found, declared):
    """One sentence: what the answers rest on."""
    if found["run_id"] is None:
        return f"Answered from what PyTorch declares: {declared.describe()} (no measured MPS run here)."
    said = f"Answered from run {found['run_id'][:12]}: {found['rank']}"
    return said + (f"; what it leaves open: {declared.describe()}." if declared else ".")


def _parse(text, dtype):
    """The check's input from pasted text: export JSON as it is (its dtype, else
    the form's), or a JSON list / names a line or comma-separated, in the form's dtype."""
    text = text.strip()
    try:
        data = json.loads(text)
    except ValueError:  # one name a line, or comma-separated
        data = [x.strip() for x in text.replace(",", "\n").splitlines() if x.strip()]
    if isinstance(data, list):
        return {"ops": data, "dtype": dtype, "model": PASTED, "mode": PASTED}
    if isinstance(data, dict) and not data.get("dtype"):
        data = dict(data, dtype=dtype)
    return data


def _resolve(data, known):
    """Bare names (`add`) become the aten overloads the run saw (`aten::add.Tensor`);
    returns the data and {name: overloads} for what was read so."""
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        return data, {}
    resolved, ops = {}, []
    for item in data["ops"]:
        name = item if isinstance(item, str) else None
        bare = name and name.split("::")[-1]
        if name and "." not in bare and f"aten::{bare}" not in known:
            found = sorted(k for k in known if k.startswith(f"aten::{bare}."))
            if found:
                resolved[name] = found
                ops += found
                continue
        ops.append(item)
    return dict(data, ops=ops), resolved


async def check_ops_page(datasette, request):
    db = get_database(datasette)
    params = request.args
    ops_text = params.get("ops") or ""
    dtype = params.get("dtype") or "float32"
    context = {"action": datasette.urls.path(PATH), "ops_text": ops_text, "dtype": dtype,
               "chosen": params.get("run") or None,
               "runs": [], "run": None, "report": None, "problem": None, "resolved": {},
               "pasted": PASTED,
               "op_base": datasette.urls.path("/-/op/"),
               "answers": [ANSWER[name] for name in ANSWERS],
               "symbols": {name: ANSWER[name].symbol for name in ANSWERS}}

    def answer(conn):
        runs = runs_q.list_runs(conn, with_results_only=True)
        # The best evidence for MPS (a measured MPS run, else PyTorch's declarations), or the run asked for.
        run, declared = answering(conn, run_id=params.get("run") or None)
        report, resolved = None, {}
        if ops_text.strip():
            known = blame.aten_names(conn, run["id"]) if run else set()
            data, resolved = _resolve(_parse(ops_text, dtype), known)
            report = check.answer(conn, check.ops_from_json(data), run, declared=declared,
                                  db_path=db.name).to_json()
            report["basis"] = _basis(report["answered_from"], declared)
        return runs, run, report, resolved
    try:
        runs, run, report, resolved = await db.execute_fn(answer)
        context.update(runs=[dict(r, label=_label(r)) for r in runs], run=run, report=report,
                       resolved=resolved)
    except MpsprobeError as e:
        context["problem"] = str(e)
    template = datasette.jinja_env.from_string(TEMPLATE)
    return await render(datasette, request, template, context, data={
        "run": context["run"] and context["run"]["id"], "report": context["report"],
        "read_as": context["resolved"], "problem": context["problem"]})


@hookimpl
def register_routes():
    return [(f"^{PATH}(\\.json)?$", check_ops_page)]
