"""The mpsprobe site: matrix, op history and compare pages, status colours, canned queries.

A Datasette plugin loaded from site/plugins/ (Datasette's --plugins-dir): thin
hooks over mpsprobe's query layer (mpsprobe.db.query), which also answers the
CLI and `check`. The canned queries are SQL Datasette runs itself; their
status words come from mpsprobe.vocabulary.
"""
import html
import urllib.parse

from datasette import hookimpl
from datasette.utils.asgi import NotFound
from markupsafe import Markup

from mpsprobe.db import query
from mpsprobe import suggestions
from mpsprobe.db.query import (declared as declared_q, grid as grid_q, history, matrix, op as op_q,
                               runs as runs_q, speed as speed_q)
from mpsprobe.db.query.op import order_dtypes
from mpsprobe.db.query.runs import VIRTUAL_MACHINE, machine_kind_sql
from mpsprobe.db.views import inline_missing, quoted, worst_status
from mpsprobe.site import limits
from mpsprobe.site.common import (STATUS_CSS_PATH, ask, cached, cases_url, get_database, op_url,
                                  reason_label, refuse, render, too_long, run_label, status_badge, status_class,
                                  status_css_page, status_symbol, template_vars, url)
from mpsprobe.speed import compiled_text, compiled_verdict
from mpsprobe.vocabulary import (COMPILED, FALLBACK, FORWARD, PARTIAL, PASS_COLUMN, PASSES, STATUSES, SUPPORT,
                                 UNSUPPORTED, is_status)

# ---------------------------------------------------------------------------- canned queries

# Every row across runs says what it was measured on, a virtual machine apart from bare metal.
RUN_COLUMNS = f"r.torch_version, r.os_name, r.os_version, r.device, {machine_kind_sql('r')} AS machine_kind"


# "Slowest ops against the CPU" once speed ladders exist (mpsprobe.db.query.speed answers).
SLOWEST_FROM_LADDERS = ("Op ladders (mpsprobe bench) whose target never beats the CPU, even at the "
                        "largest size or batch measured: the best speedup reached, and where. "
                        "Optionally restrict to a device such as mps.")


def _pairs_query(columns, where, order):
    """(op, dtype) roll-ups of every run, with the run's torch, OS and device."""
    return f"""
SELECT s.op_id, s.dtype, s.status, {columns}, s.n_cases, s.pass,
       {RUN_COLUMNS}, s.run_id
FROM op_dtype_status s JOIN runs r ON r.id = s.run_id
WHERE {where}
ORDER BY {order}"""


CANNED_QUERIES = {
    "cell_cases": {
        "title": "Cases behind one matrix cell",
        "description": "Every sample of one (run, op, dtype): its inputs, status, error "
                       "message, fallback aten ops, numerical error and timings.",
        "sql": """
SELECT r.case_id, c.sample, r.status, r.reason, r.check_kind, r.error_type, r.message,
       r.aten_op, r.fallback_ops, r.aten_ops, r.max_abs_err, r.max_rel_err, r.ref_abs_err,
       r.ref_ms, r.target_ms, r.speedup, r.duration_s, r.signal, r.pass, r.reason_kind
FROM results r LEFT JOIN cases c ON c.id = r.case_id
WHERE r.run_id = :run_id AND r.op_id = :op_id AND r.dtype = :dtype
ORDER BY c.sample_index, r.pass""",
    },
    "fallbacks": {
        "title": "Ops that fall back to the CPU",
        "description": "(op, dtype) pairs where at least one case ran an aten op on the CPU. "
                       "Leave run_id empty for every run.",
        # A compiled case's fallback is the compiler leaving an op to eager, on the target.
        "sql": _pairs_query(f"s.n_{FALLBACK}, s.fallback_ops",
                            f"s.n_{FALLBACK} > 0 AND s.pass != {quoted(COMPILED)} "
                            "AND (:run_id = '' OR s.run_id = :run_id)",
                            "r.started DESC, s.op_id, s.dtype"),
    },
    "unsupported_for_dtype": {
        "title": "Ops unsupported for a dtype",
        "description": "(op, dtype) pairs the target refused. Give a dtype such as float16, "
                       "or leave it empty for all.",
        "sql": _pairs_query(f"s.aten_op, s.n_{UNSUPPORTED}",
                            f"s.status = {quoted(UNSUPPORTED)} AND (:dtype = '' OR s.dtype = :dtype)",
                            "r.started DESC, s.op_id, s.dtype"),
    },
    "slowest_vs_cpu": {
        "title": "Slowest ops against the CPU",
        "description": "(op, dtype) pairs whose mean speedup over the CPU is below 1, slowest "
                       "first, from the per-case timing: launch-bound (OpInfo's samples are "
                       "tiny), so nearly every op shows. Speed ladders (mpsprobe bench) answer "
                       "this properly. Optionally restrict to a device such as mps.",
        "sql": _pairs_query("round(s.mean_speedup, 3) AS mean_speedup",
                            "s.mean_speedup < 1 AND (:device = '' OR r.device = :device)",
                            "s.mean_speedup"),
    },
    "first_pass_version": {
        "title": "First torch version where each op passes",
        "description": "Per (op, dtype, pass, device, kind of machine, OS major): the oldest measured torch "
                       "version in which the op passes, the newest in which it failed, and "
                       "the version it has passed since.",
        "sql": """
SELECT op_id, dtype, device, machine_kind, os_name, os_major, first_pass_torch, last_fail_torch,
       passing_since_torch, latest_torch, latest_status, pass
FROM op_firsts WHERE :op_id = '' OR op_id = :op_id
ORDER BY op_id, dtype, pass, device, machine_kind, os_name, os_major""",
    },
    "check_ops": {
        "title": "Check a list of ops",
        "description": "Paste op names separated by commas or newlines; get each one's "
                       "status per dtype in one run (default: the run mpsprobe answers "
                       "from, as on the matrix). An op with no status is not in that run.",
        "sql": """
WITH RECURSIVE
split(item, rest) AS (
  SELECT '', replace(replace(:ops, char(13), ''), char(10), ',') || ','
  UNION ALL
  SELECT trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)
  FROM split WHERE rest != ''),
wanted AS (SELECT DISTINCT item AS op_id FROM split WHERE item != ''),
chosen AS (SELECT CASE WHEN :run_id = '' THEN {default_run} ELSE :run_id END AS id)
SELECT w.op_id, s.dtype, s.status, s.n_cases, s.fallback_ops, s.aten_op, s.pass,
       (SELECT id FROM chosen) AS run_id
FROM wanted w LEFT JOIN op_dtype_status s
  ON s.op_id = w.op_id AND s.run_id = (SELECT id FROM chosen)
ORDER BY w.op_id, s.dtype, s.pass""",
    },
    # The full-text index (schema 3 on) ranks matches across op ids, aten ops,
    # fallbacks and messages; escape_fts makes any typed text a safe query.
    "search": {
        "title": "Search ops, aten ops and error messages",
        "description": "Full-text search over op names, the aten ops they dispatch, "
                       "fallbacks and error messages. Each word matches as a prefix "
                       "(conv finds conv2d); quotes and operators are ignored.",
        "sql": """
SELECT r.op_id, r.dtype, r.status, r.aten_op, r.fallback_ops, r.message, r.run_id,
       r.case_id, r.pass
FROM results_fts JOIN results r ON r.rowid = results_fts.rowid
WHERE mpsprobe_fts(:q) != '' AND results_fts MATCH mpsprobe_fts(:q)
ORDER BY rank""",
        # The SQL stays one click away ("show SQL"): a porter came to search, not to read it.
        "hide_sql": True,
    },
}

# Search in a database without the full-text index: substrings of op names,
# aten ops and messages. An aten op's row carries the worst status of its cases
# (by the vocabulary's order: as text, 'pass' would outrank 'crash').
SQL_SEARCH_SUBSTRINGS = f"""
SELECT 'op' AS kind, o.id AS matched, o.id AS op_id, NULL AS dtype, NULL AS status,
       NULL AS n_results
FROM ops o WHERE :q != '' AND (o.id LIKE '%' || :q || '%' OR o.aten_name LIKE '%' || :q || '%')
UNION ALL
SELECT 'aten op', je.value, r.op_id, r.dtype, {worst_status('r.status')}, count(*)
FROM results r, json_each(r.aten_ops) je
WHERE :q != '' AND r.aten_ops LIKE '%' || :q || '%' AND je.value LIKE '%' || :q || '%'
GROUP BY je.value, r.op_id, r.dtype
UNION ALL
SELECT 'message', r.message, r.op_id, r.dtype, r.status, count(*)
FROM results r WHERE :q != '' AND r.message LIKE '%' || :q || '%'
GROUP BY r.message, r.op_id, r.dtype, r.status
ORDER BY 1 DESC, 3, 4"""

# ---------------------------------------------------------------------------- helpers


def op_pattern(text):
    """A LIKE pattern from the op filter: a glob if it has * or ?, else a substring."""
    text = (text or "").strip()
    if not text:
        return ""
    if "*" in text or "?" in text:
        return text.replace("*", "%").replace("?", "_")
    return f"%{text}%"


def matrix_row(op_id, href, cells):
    """One matrix row as HTML. Built here, not in Jinja: async Jinja costs ~40 µs a
    cell, which on a full sweep (9,000 cells) is most of the page's time. A cell
    shows its status's symbol (the word is in the title and the legend). `cells`:
    (status, link already escaped for an attribute, title) or None."""
    esc = html.escape
    parts = [f'<tr><th class="mp-op"><a href="{esc(href)}"><bdi>{esc(op_id)}</bdi></a></th>']
    for cell in cells:
        if cell is None:
            parts.append('<td class="mp-none"></td>')
        else:
            status, link, title = cell
            parts.append(f'<td class="{status_class(status)}"><a href="{link}" '
                         f'title="{esc(title)}">{status_symbol(status)}</a></td>')
    parts.append("</tr>")
    return "".join(parts)


def _picked(conn, args):
    """(run, problem): the run a page shows (?run=ID, or the run picker's default
    under ?torch=&os=&device=), or None and the picker's one line on why not."""
    try:
        return runs_q.pick_run(conn, run_id=args.get("run") or None, torch=args.get("torch"),
                               os=args.get("os"), device=args.get("device")), None
    except runs_q.RunNotFound as e:
        return None, str(e)


def parse_declared(choice):
    """'declared:TORCH[:DEVICE]' -> (torch, device); device defaults to mps."""
    parts = choice.split(":")
    return (parts[1] if len(parts) > 1 else ""), (parts[2] if len(parts) > 2 and parts[2] else "mps")

# ---------------------------------------------------------------------------- pages


@cached
async def matrix_page(datasette, request):
    db = get_database(datasette)
    args = request.args
    runs = await ask(db, runs_q.list_runs)
    declared_choices = await ask(db, declared_q.choices)
    choice = args.get("run", "")
    for name, what in (("op", "the op filter"), ("run", "the run")):
        if too_long(args.get(name)):
            return await refuse(datasette, request, what, args.get(name))
    op_like = op_pattern(args.get("op"))
    wanted = [s for s in args.getlist("status") if is_status(s)]
    pass_ = args.get(PASS_COLUMN) if args.get(PASS_COLUMN) in PASSES else FORWARD
    run = declared = problem = None
    if choice.startswith("declared:"):
        torch, device = parse_declared(choice)
        declared = {"torch_version": torch, "device": device}
        rows = await ask(db, declared_q.matrix, torch, device, op_like)
        if not rows and not op_like:
            have = ", ".join(f"declared:{d['torch_version']}:{d['device']}" for d in declared_choices)
            problem = (f"Nothing is declared for torch {torch} on {device}."
                       + (f" Declared: {have}." if have else " This database holds no declarations."))
            declared = None
    else:
        run, problem = await ask(db, _picked, {"run": choice, "torch": args.get("torch", ""),
                                               "os": args.get("os", ""),
                                               "device": args.get("device", "")})
        rows = await ask(db, matrix.cells, run["id"], op_like, pass_) if run else []
    cells, dtypes = {}, set()
    for row in rows:
        cells.setdefault(row["op_id"], {})[row["dtype"]] = row
        dtypes.add(row["dtype"])
    dtypes = order_dtypes(dtypes)
    totals = dict.fromkeys(STATUSES, 0)
    # Cell links share one prefix: built once, not per cell (9,000 cells on a full sweep).
    if run:
        prefix = cases_url(datasette, db, run["id"], "", "") + "&op_id="
    elif declared:
        prefix = url(datasette, f"/{db.name}/declared", torch_version=declared["torch_version"],
                     device=declared["device"]) + "&op_id="
    # Escaped once: what quote() adds (%XX, letters, digits, _.-~) needs no escaping.
    quote, prefix = urllib.parse.quote, html.escape(prefix) if (run or declared) else ""
    quoted_dtypes = {d: quote(d, safe="") for d in dtypes}
    counted = [("n_" + s, s) for s in STATUSES]
    table, data = [], []
    for op_id in sorted(cells):
        by_dtype = cells[op_id]
        if wanted and not any(c["status"] in wanted for c in by_dtype.values()):
            continue
        row_cells = []
        op_prefix = prefix + quote(op_id, safe="") + "&amp;dtype="
        for dtype in dtypes:
            cell = by_dtype.get(dtype)
            if cell is None:
                row_cells.append(None)
                continue
            status = cell["status"]
            totals[status] = totals.get(status, 0) + 1
            if run:
                tally = ", ".join(f"{cell[n]} {s}" for n, s in counted if cell[n])
                title = f"{dtype}: {status} ({tally})"
            else:
                title = f"{dtype}: declared {status} ({cell['source'] or ''})"
            row_cells.append((status, op_prefix + quoted_dtypes[dtype], title))
        table.append(matrix_row(op_id, op_url(datasette, op_id), row_cells))
        data.append({"op_id": op_id, "cells": {d: by_dtype[d]["status"] for d in dtypes
                                               if d in by_dtype}})
    return await render(datasette, request, "mpsprobe_matrix.html", {
        "title": "Compatibility matrix", "db": db.name, "runs": runs, "run": run,
        "run_label": run_label, "declared": declared, "declared_choices": declared_choices,
        "choice": choice or (run["id"] if run else ""), "op_filter": args.get("op", ""),
        "wanted": wanted, "dtypes": dtypes, "table": table, "totals": totals,
        "passes": PASSES, "pass_": pass_, "pass_param": PASS_COLUMN,
        "problem": problem, "table_html": Markup("\n".join(table)),
        "compare_url": url(datasette, "/-/compare", b=run["id"]) if run else None,
    }, data={"run": run, "declared": declared, "problem": problem, "dtypes": dtypes,
             "totals": totals, "rows": data})


def picker_label(run):
    """A run in the compare picker, told apart from its neighbours: what it is (sweep,
    bench, model replay), its samples and passes, its cases, when it started."""
    import json
    try:
        options = json.loads(run.get("options") or "{}")
    except ValueError:
        options = {}
    options = options if isinstance(options, dict) else {}
    source = run.get("source") or "opinfo"
    kind = {"opinfo": "sweep", "bench": "bench (speed only)", "model": "model replay"}.get(source, source)
    if source == "opinfo" and not run.get("has_results"):
        kind = "sweep, no results"
    parts = [run_label(run), kind]
    if options.get("samples"):
        parts.append(f"{options['samples']} samples")
    if isinstance(options.get("passes"), list):
        parts.append("passes " + ", ".join(map(str, options["passes"])))
    if run.get("cases_total"):
        parts.append(f"{run['cases_total']} cases")
    parts.append((run.get("started") or "")[:16].replace("T", " "))
    return " · ".join(p for p in parts if p)


async def variants_page(datasette, request, op_id, variants):
    links = [(v, op_url(datasette, v)) for v in variants]
    return await render(datasette, request, "mpsprobe_variants.html", {
        "title": op_id, "op_id": op_id, "variants": links},
        data={"op_id": op_id, "variants": variants})


@cached
async def op_page(datasette, request):
    db = get_database(datasette)
    op_id = urllib.parse.unquote(request.url_vars["op_id"])
    page = await ask(db, op_q.op_page, op_id)
    speed = await op_speed(datasette, db, op_id)
    if page is None and not speed:
        variants = await ask(db, op_q.variants, op_id)
        if variants:
            return await variants_page(datasette, request, op_id, variants)
        similar = await ask(db, op_q.similar, op_id)
        hint = f"; did you mean {', '.join(similar)}?" if similar else ""
        raise NotFound(f"no op {op_id} in this database{hint}")
    page = page or op_q.EMPTY_PAGE
    dtypes = page["dtypes"]
    passes = []
    for pass_, configurations in page["history"].items():
        passes.append({"name": pass_, "rows": [{
            "label": run_label(c["run"]),
            "matrix_url": url(datasette, "/-/matrix", run=c["run"]["id"], op=op_id),
            "cells": [(c["cells"].get(d), cases_url(datasette, db, c["run"]["id"], op_id, d))
                      for d in dtypes],
        } for c in configurations]})
    messages = [dict(m, reason_label=reason_label(m["reason_kind"]), source=message_source(m["message"]),
                     where=m["device"] + (f" · {VIRTUAL_MACHINE}" if m["machine_kind"] == VIRTUAL_MACHINE else ""),
                     suggestions=suggestions.for_case(op_id, m["status"], m["reason_kind"],
                                                      m["dtype"], m["message"], m["min_macos"]))
                for m in page["messages"]]
    advice = suggestions.unique(s for m in messages for s in m["suggestions"])
    answers = await ask(db, grid_q.op_answers, op_id)
    mps = [g for g in answers["groups"] if g["device"] == "mps"]
    others = [g for g in answers["groups"] if g["device"] != "mps"]
    compiled = await compiled_section(datasette, db, op_id)
    return await render(datasette, request, "mpsprobe_op.html", {
        "title": op_id, "db": db.name, "op": page["op"], "op_id": op_id, "dtypes": dtypes,
        "mps_answers": [_answer_group(g) for g in mps], "other_answers": [_answer_group(g) for g in others],
        "answer_notes": list(dict.fromkeys(t for ts in answers["footnotes"].values() for t in ts)),
        "firsts_heads": FIRSTS_HEADS,
        "passes": passes, "declared": page["declared"], "releases": page["releases"],
        "firsts": page["firsts"], "notes": page["notes"], "messages": messages,
        "advice": advice, "grid_url": url(datasette, "/-/grid", op=op_id), "speed": speed,
        "compiled": compiled,
        "fallbacks_url": url(datasette, f"/{db.name}/results", op_id=op_id, status=FALLBACK),
    }, data={"op_id": op_id, "op": page["op"], "dtypes": dtypes, "notes": page["notes"],
             "history": {p["name"]: [{"run": c["run"]["id"], "label": run_label(c["run"]),
                                      "cells": c["cells"]} for c in page["history"][p["name"]]]
                         for p in passes},
             "releases": page["releases"], "declared": page["declared"],
             "messages": page["messages"], "suggestions": [s._asdict() for s in advice],
             "answers": {"mps": mps, "other_devices": others, "footnotes": answers["footnotes"]},
             "compiled": {"mps": compiled["mps_groups"], "other_devices": compiled["other_groups"],
                          "beside_eager": compiled["beside"], "speeds": compiled["speeds"]}})


async def compiled_section(datasette, db, op_id):
    """The op page's compiled layer: the grid's compiled answers (MPS groups apart from the
    others), each run's compiled status beside its eager one, and compiled-vs-eager speeds."""
    answers = await ask(db, grid_q.op_answers, op_id, COMPILED)
    beside = [dict(r, where=run_label(r), why=reason_label(r["reason_kind"]),
                   cases_url=cases_url(datasette, db, r["run_id"], op_id, r["dtype"]))
              for r in await ask(db, op_q.compiled_beside_eager, op_id)]
    speeds = [dict(r, where=run_label(r), verdict=compiled_verdict(r), text=compiled_text(r))
              for r in await ask(db, speed_q.compiled_speeds, op_id)]
    return {"mps": [_answer_group(g) for g in answers["groups"] if g["device"] == "mps"],
            "others": [_answer_group(g) for g in answers["groups"] if g["device"] != "mps"],
            "mps_groups": [g for g in answers["groups"] if g["device"] == "mps"],
            "other_groups": [g for g in answers["groups"] if g["device"] != "mps"],
            "beside": beside, "speeds": speeds}


# The first-passing-versions table in a porter's words, not the view's column names.
FIRSTS_HEADS = {"dtype": "dtype", "device": "device", "machine_kind": "machine", "os_name": "OS",
                "os_major": "OS version", "first_pass_torch": "first passed in torch",
                "last_fail_torch": "last failed in torch", "passing_since_torch": "works since torch",
                "latest_torch": "newest torch measured", "latest_status": "its status",
                "first_seen_torch": "first measured in torch", "n_versions": "torch versions measured"}


def message_source(text):
    """(label, URL) of where a message comes from, from the message catalogue: the public
    report it was copied from, else the PyTorch file that raises it at the newest tag seen."""
    from mpsprobe.engine.messages import match_family
    family, _ = match_family(text)
    if family is None:
        return None
    if family.reports:
        url = family.reports[0]
        return (f"PyTorch issue #{url.rsplit('/', 1)[-1]}" if "/issues/" in url else "report", url)
    for path, tags in family.sources:
        if tags:
            return (f"PyTorch {tags[-1]}: {path.rsplit('/', 1)[-1]}",
                    f"https://github.com/pytorch/pytorch/blob/{tags[-1]}/{path}")
    return None


def _answer_group(group):
    """One row of the op page's opening grid: a column group's answers, oldest release first."""
    cells = []
    for c in group["cells"]:
        count = f"{c['k']} of {c['n']} dtypes" if c["answer"] == PARTIAL else ""
        cells.append({"torch_version": c["torch_version"], "answer": c["answer"],
                      "symbol": SUPPORT[c["answer"]].symbol, "count": count, "declared": c["declared_only"],
                      "notes": c["notes"],
                      "title": "; ".join([f"torch {c['torch_version']}: {c['answer']}", *c["notes"]]
                                         + (["declared, not measured"] if c["declared_only"] else []))})
    return {"label": group["label"], "declared": group["declared"], "cells": cells,
            "newest": cells[-1] if cells else None}


async def op_speed(datasette, db, op_id):
    """The op's speed section (site/plugins/speed.py: ladder charts), Markup; "" without it."""
    from datasette.plugins import pm
    plugin = pm.get_plugin("speed.py")
    if plugin is None or not hasattr(plugin, "op_section"):
        return ""
    return Markup(await plugin.op_section(datasette, db, op_id))


@cached
async def compare_page(datasette, request):
    db = get_database(datasette)
    runs = await ask(db, runs_q.list_runs)
    by_id = {r["id"]: r for r in runs}
    b = by_id.get(request.args.get("b"))
    if b is None:   # default: the run picker's sweep, and the comparable sweep before it
        b, _ = await ask(db, _picked, {})
    a = by_id.get(request.args.get("a"))
    if a is None and b is not None:
        a = history.previous_run(runs, b)
    changes = []
    if a and b:
        for row in await ask(db, history.changes, a["id"], b["id"]):
            changes.append({
                "op_id": row["op_id"], "dtype": row["dtype"], "kind": row["kind"],
                "op_url": op_url(datasette, row["op_id"]),
                "a": (row["status_a"], cases_url(datasette, db, a["id"], row["op_id"], row["dtype"])),
                "b": (row["status_b"], cases_url(datasette, db, b["id"], row["op_id"], row["dtype"])),
            })
    kinds = [k for k in history.CHANGE_KINDS if any(c["kind"] == k for c in changes)]
    shown = request.args.get("kind")
    listed = [c for c in changes if not shown or c["kind"] == shown]
    return await render(datasette, request, "mpsprobe_compare.html", {
        "title": "Compare runs", "db": db.name, "runs": runs, "a": a, "b": b,
        "run_label": run_label, "picker_label": picker_label, "kinds": kinds, "shown": shown,
        "counts": {k: sum(c["kind"] == k for c in changes) for k in kinds},
        "changes": listed,
    }, data={"a": a and a["id"], "b": b and b["id"],
             "changes": [{"op_id": c["op_id"], "dtype": c["dtype"], "kind": c["kind"],
                          "before": c["a"][0], "after": c["b"][0]} for c in listed]})

# ---------------------------------------------------------------------------- hooks


@hookimpl
def register_routes():
    return [
        (r"^/-/matrix(\.json)?$", matrix_page),
        (r"^/-/op/(?P<op_id>[^/]+?)(\.json)?$", op_page),
        (r"^/-/compare(\.json)?$", compare_page),
        (r"^/-/mpsprobe-statuses\.css$", status_css_page),
    ]


@hookimpl
def canned_queries(datasette, database):
    db = get_database(datasette)
    if database != db.name:
        return {}

    async def queries():
        # A query's default run is the run picker's answer, not a second picker in SQL.
        run, _ = await ask(db, _picked, {})
        default_run = quoted(run["id"]) if run else "NULL"
        have = await ask(db, query.present)
        chosen = dict(CANNED_QUERIES)
        if await ask(db, speed_q.has_ladders):
            chosen["slowest_vs_cpu"] = dict(chosen["slowest_vs_cpu"], sql=speed_q.SQL_SLOWER_THAN_CPU,
                                            description=SLOWEST_FROM_LADDERS)
        if "results_fts" not in have:
            chosen["search"] = dict(chosen["search"], sql=SQL_SEARCH_SUBSTRINGS,
                                    description="Substring search over op names, the aten ops "
                                                "they dispatch and error messages.")
        return {name: dict(q, sql=inline_missing(q["sql"].strip(), have)
                           .replace("{default_run}", default_run))
                for name, q in chosen.items()}
    return queries


@hookimpl
def render_cell(value, column, table, datasette):
    """Colour every status, in every table, view and query; link op ids to their history."""
    if not isinstance(value, str):
        return None
    if "status" in column and is_status(value):
        return status_badge(value)
    if column == "op_id" and (table is None or table.startswith("op_")):
        return Markup(f'<a href="{op_url(datasette, value)}">{html.escape(value)}</a>')
    return None


@hookimpl
def extra_js_urls(datasette):
    # Sortable columns on the tables that ask for them (class mp-sortable), loaded after the page.
    return [{"url": datasette.urls.path("/mpsprobe-static/sortable.js"), "module": True}]


@hookimpl
def extra_css_urls(datasette):
    # The status colours first (made from the vocabulary), then the site's own CSS that uses them.
    return [datasette.urls.path(STATUS_CSS_PATH), datasette.urls.path("/mpsprobe-static/site.css")]


def plugin_page_path(filename):
    """The page route of another plugin in site/plugins/ (e.g. check_ops.py), if loaded."""
    from datasette.plugins import pm
    plugin = pm.get_plugin(filename)
    if plugin is None or not hasattr(plugin, "register_routes"):
        return None
    for regex, _ in plugin.register_routes() or []:
        path = regex.replace(r"(\.json)?", "").strip("^$")
        if "(" not in path:
            return path
    return None


def navigation(datasette):
    """(label, href) of every page of the site, for every page (errors included)."""
    db = get_database(datasette)
    links = [("Grid", "/-/grid"), ("Matrix", "/-/matrix"), ("Compare", "/-/compare"),
             ("Search", plugin_page_path("search.py") or f"/{db.name}/search"), ("Fallbacks", f"/{db.name}/fallbacks"),
             ("Check ops", plugin_page_path("check_ops.py") or f"/{db.name}/check_ops"),
             ("Findings", plugin_page_path("findings.py")),
             ("Speed", plugin_page_path("speed.py")),
             ("Queries", f"/{db.name}#queries"), ("Runs", f"/{db.name}/runs"),
             ("Legend", "/-/legend")]
    return [(label, datasette.urls.path(path)) for label, path in links if path]


@hookimpl
def extra_template_vars(datasette):
    return dict(template_vars(), mpsprobe_nav=navigation(datasette),
                mpsprobe_queries=[(name, q["title"]) for name, q in CANNED_QUERIES.items()],
                mpsprobe_db=get_database(datasette).name)


@hookimpl
def startup(datasette):
    # Datasette renders 404 and 500 pages without extra_template_vars: the
    # navigation goes into the templates' globals, so error pages keep it.
    try:
        datasette.jinja_env.globals["mpsprobe_nav"] = navigation(datasette)
    except NotFound:
        pass


@hookimpl
def prepare_connection(conn):
    """Every connection: resource limits on arbitrary SQL (mpsprobe.site.limits),
    and the search's query builder."""
    limits.limit(conn)
    conn.create_function("mpsprobe_fts", 1, fts_query, deterministic=True)


def fts_query(text):
    """A safe FTS5 query from typed text: each word a prefix ('conv' finds
    conv2d); quotes and operators are dropped. '' when no word is left."""
    import re
    return " ".join(f'"{w}"*' for w in re.findall(r"\w+", text or ""))


@hookimpl
def asgi_wrapper(datasette):
    """Gzip outside, the traffic limits (mpsprobe.site.guard) inside: the response
    cap counts the bytes of the answer, not of its compressed form."""
    from mpsprobe.site.guard import Guard
    from mpsprobe.site.gzip import gzip_app

    def canned_names(database):
        return set(CANNED_QUERIES) | set(datasette.metadata("queries", database=database) or {})
    return lambda app: gzip_app(Guard(datasette, app, canned_names))
