"""The mpsprobe site: matrix, op history and compare pages, status colours, canned queries.

A Datasette plugin loaded from site/plugins/ (Datasette's --plugins-dir). It
imports nothing from mpsprobe, so the same files work under `datasette
publish`; the status vocabulary and the database name come from the plugin
configuration ("plugins": {"mpsprobe": ...}) that `mpsprobe serve` writes.

All of the site's SQL is in the SQL section below.
"""
import html
import re
import urllib.parse

from datasette import hookimpl
from datasette.utils.asgi import NotFound, Response
from markupsafe import Markup

# The canonical column order of the matrix; dtypes not listed follow, sorted.
DTYPE_ORDER = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
               "float32", "float64", "complex32", "complex64", "complex128")
FALLBACK_STATUSES = ("skip", "pass", "fallback", "mismatch", "unsupported", "error",
                     "timeout", "crash")
OPTIONAL_VIEWS = ("op_history", "op_firsts", "declared", "results_fts", "speed_crossovers")
# ("Slowest ops against the CPU" answers from speed_crossovers once it holds a measured ladder.)

# ---------------------------------------------------------------------------- SQL

SQL_RUNS = """
SELECT id, state, started, torch_version, os_name, os_version, device, device_name,
       backend, chip, cases_total
FROM runs ORDER BY started DESC"""

# The matrix: one query over the roll-up view; SQLite pushes run_id into the GROUP BY.
SQL_MATRIX = """
SELECT op_id, dtype, status, n_cases, {counts}
FROM op_dtype_status
WHERE run_id = :run_id AND (:op = '' OR op_id LIKE :op)"""

SQL_DECLARED_CHOICES = """
SELECT torch_version, device, count(*) AS n FROM declared
GROUP BY torch_version, device ORDER BY mpsprobe_version_key(torch_version) DESC, device"""

SQL_DECLARED_MATRIX = """
SELECT op_id, dtype, status, source, note FROM declared
WHERE torch_version = :torch AND device = :device AND (:op = '' OR op_id LIKE :op)"""

SQL_OP_HISTORY_VIEW = "SELECT run_id, dtype, status FROM op_history WHERE op_id = :op_id"
SQL_OP_HISTORY = """
SELECT run_id, dtype, status, n_cases FROM op_dtype_status WHERE op_id = :op_id"""
SQL_OP_FIRSTS = """
SELECT dtype, device, os_name, os_major, first_pass_torch, last_fail_torch,
       passing_since_torch, latest_torch, latest_status
FROM op_firsts WHERE op_id = :op_id ORDER BY device, dtype"""
SQL_OP_DECLARED = """
SELECT torch_version, device, dtype, status, source, note FROM declared
WHERE op_id = :op_id ORDER BY mpsprobe_version_key(torch_version) DESC, device, dtype"""

SQL_COMPARE = """
WITH a AS (SELECT op_id, dtype, status FROM op_dtype_status WHERE run_id = :a),
     b AS (SELECT op_id, dtype, status FROM op_dtype_status WHERE run_id = :b)
SELECT a.op_id, a.dtype, a.status AS status_a, b.status AS status_b
FROM a LEFT JOIN b USING (op_id, dtype) WHERE b.status IS NOT a.status
UNION ALL
SELECT b.op_id, b.dtype, NULL, b.status
FROM b LEFT JOIN a USING (op_id, dtype) WHERE a.status IS NULL
ORDER BY 1, 2"""

# The versions view knows more (OS major, passing-since); the canned query prefers it.
SQL_FIRST_PASS_FROM_VIEW = """
SELECT op_id, dtype, device, os_name, os_major, first_pass_torch, last_fail_torch,
       passing_since_torch, latest_torch, latest_status
FROM op_firsts WHERE :op_id = '' OR op_id = :op_id
ORDER BY op_id, dtype, device, os_name, os_major"""

RUN_COLUMNS = "r.torch_version, r.os_name, r.os_version, r.device"

CANNED_QUERIES = {
    "cell_cases": {
        "title": "Cases behind one matrix cell",
        "description": "Every sample of one (run, op, dtype): its inputs, status, error "
                       "message, fallback aten ops, numerical error and timings.",
        "sql": """
SELECT r.case_id, c.sample, r.status, r.reason, r.check_kind, r.error_type, r.message,
       r.aten_op, r.fallback_ops, r.aten_ops, r.max_abs_err, r.max_rel_err, r.ref_abs_err,
       r.ref_ms, r.target_ms, r.speedup, r.duration_s, r.signal
FROM results r LEFT JOIN cases c ON c.id = r.case_id
WHERE r.run_id = :run_id AND r.op_id = :op_id AND r.dtype = :dtype
ORDER BY c.sample_index""",
    },
    "fallbacks": {
        "title": "Ops that fall back to the CPU",
        "description": "(op, dtype) pairs where at least one case ran an aten op on the CPU. "
                       "Leave run_id empty for every run.",
        "sql": f"""
SELECT s.op_id, s.dtype, s.status, s.n_fallback, s.n_cases, s.fallback_ops,
       {RUN_COLUMNS}, s.run_id
FROM op_dtype_status s JOIN runs r ON r.id = s.run_id
WHERE s.n_fallback > 0 AND (:run_id = '' OR s.run_id = :run_id)
ORDER BY r.started DESC, s.op_id, s.dtype""",
    },
    "unsupported_for_dtype": {
        "title": "Ops unsupported for a dtype",
        "description": "(op, dtype) pairs the target refused. Give a dtype such as float16, "
                       "or leave it empty for all.",
        "sql": f"""
SELECT s.op_id, s.dtype, s.status, s.aten_op, s.n_unsupported, s.n_cases,
       {RUN_COLUMNS}, s.run_id
FROM op_dtype_status s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'unsupported' AND (:dtype = '' OR s.dtype = :dtype)
ORDER BY r.started DESC, s.op_id, s.dtype""",
    },
    "slowest_vs_cpu": {
        "title": "Slowest ops against the CPU",
        "description": "(op, dtype) pairs whose mean speedup over the CPU is below 1, slowest "
                       "first, from the per-case timing: launch-bound (OpInfo's samples are "
                       "tiny), so nearly every op shows. Speed ladders (mpsprobe bench) answer "
                       "this properly. Optionally restrict to a device such as mps.",
        "sql": f"""
SELECT s.op_id, s.dtype, s.status, round(s.mean_speedup, 3) AS mean_speedup, s.n_cases,
       {RUN_COLUMNS}, s.run_id
FROM op_dtype_status s JOIN runs r ON r.id = s.run_id
WHERE s.mean_speedup < 1 AND (:device = '' OR r.device = :device)
ORDER BY s.mean_speedup""",
    },
    "first_pass_version": {
        "title": "First torch version where each op passes",
        "description": "Per (op, dtype, device, OS): the oldest measured torch version in "
                       "which the op passes, and the newest one in which it did not.",
        "sql": """
WITH m AS (
  SELECT s.op_id, s.dtype, r.device, r.os_name, r.os_version, r.torch_version, s.status
  FROM op_dtype_status s JOIN runs r ON r.id = s.run_id
  WHERE :op_id = '' OR s.op_id = :op_id)
SELECT op_id, dtype, device, os_name,
  (SELECT torch_version FROM m m2 WHERE m2.op_id = m.op_id AND m2.dtype = m.dtype
     AND m2.device = m.device AND m2.os_name IS m.os_name AND m2.status = 'pass'
   ORDER BY mpsprobe_version_key(torch_version) LIMIT 1) AS first_pass_torch,
  (SELECT torch_version FROM m m2 WHERE m2.op_id = m.op_id AND m2.dtype = m.dtype
     AND m2.device = m.device AND m2.os_name IS m.os_name AND m2.status != 'pass'
   ORDER BY mpsprobe_version_key(torch_version) DESC LIMIT 1) AS last_fail_torch
FROM m GROUP BY op_id, dtype, device, os_name
ORDER BY op_id, dtype, device""",
    },
    "check_ops": {
        "title": "Check a list of ops",
        "description": "Paste op names separated by commas or newlines; get each one's "
                       "status per dtype in one run (default: the newest run). An op "
                       "with no status is not in that run.",
        "sql": """
WITH RECURSIVE
split(item, rest) AS (
  SELECT '', replace(replace(:ops, char(13), ''), char(10), ',') || ','
  UNION ALL
  SELECT trim(substr(rest, 1, instr(rest, ',') - 1)), substr(rest, instr(rest, ',') + 1)
  FROM split WHERE rest != ''),
wanted AS (SELECT DISTINCT item AS op_id FROM split WHERE item != ''),
chosen AS (SELECT CASE WHEN :run_id = ''
  THEN (SELECT id FROM runs ORDER BY started DESC LIMIT 1) ELSE :run_id END AS id)
SELECT w.op_id, s.dtype, s.status, s.n_cases, s.fallback_ops, s.aten_op,
       (SELECT id FROM chosen) AS run_id
FROM wanted w LEFT JOIN op_dtype_status s
  ON s.op_id = w.op_id AND s.run_id = (SELECT id FROM chosen)
ORDER BY w.op_id, s.dtype""",
    },
    "search": {
        "title": "Search ops, aten ops and error messages",
        "description": "Case-insensitive substring search over op names, the aten ops "
                       "they dispatch and the messages they raised.",
        "sql": """
SELECT 'op' AS kind, o.id AS matched, o.id AS op_id, NULL AS dtype, NULL AS status,
       NULL AS n_results
FROM ops o WHERE :q != '' AND (o.id LIKE '%' || :q || '%' OR o.aten_name LIKE '%' || :q || '%')
UNION ALL
SELECT 'aten op', je.value, r.op_id, r.dtype, max(r.status), count(*)
FROM results r, json_each(r.aten_ops) je
WHERE :q != '' AND r.aten_ops LIKE '%' || :q || '%' AND je.value LIKE '%' || :q || '%'
GROUP BY je.value, r.op_id, r.dtype
UNION ALL
SELECT 'message', r.message, r.op_id, r.dtype, r.status, count(*)
FROM results r WHERE :q != '' AND r.message LIKE '%' || :q || '%'
GROUP BY r.message, r.op_id, r.dtype, r.status
ORDER BY 1 DESC, 3, 4 LIMIT 500""",
    },
}

# With the full-text index (schema 3 on), search ranks matches across op ids,
# aten ops, fallbacks and messages; escape_fts makes any typed text a safe query.
SQL_SEARCH_FTS = """
SELECT r.op_id, r.dtype, r.status, r.aten_op, r.fallback_ops, r.message, r.run_id,
       r.case_id
FROM results_fts JOIN results r ON r.rowid = results_fts.rowid
WHERE :q != '' AND results_fts MATCH escape_fts(:q)
ORDER BY rank LIMIT 500"""

# ---------------------------------------------------------------------------- helpers


# "Slowest ops against the CPU" once speed ladders exist: ops whose target never wins.
SLOWEST_FROM_LADDERS = {
    "description": "Op ladders (mpsprobe bench) whose target never beats the CPU, even at the "
                   "largest size or batch measured: the best speedup reached, and where. "
                   "Optionally restrict to a device such as mps.",
    "sql": f"""
SELECT c.op, c.dtype, c.pass_name, c.family, round(c.best_speedup, 3) AS best_speedup,
       c.by || ' ' || c.best_at AS best_at, c.largest, {RUN_COLUMNS}, c.run_id
FROM speed_crossovers c JOIN runs r ON r.id = c.run_id
WHERE c.rungs > 0 AND c.always = 0 AND c.crossover IS NULL AND r.device NOT LIKE 'cpu%'
  AND (:device = '' OR r.device = :device)
ORDER BY c.best_speedup""",
}


def version_key(text):
    """Numeric parts of a version, for ordering: '2.5.1+cu121' -> (2, 5, 1)."""
    parts = []
    for piece in re.split(r"[.+-]", text or ""):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def version_key_sql(text):
    return ".".join(f"{n:06d}" for n in version_key(text))


def config(datasette):
    conf = datasette.plugin_config("mpsprobe") or {}
    statuses = tuple(conf.get("statuses") or FALLBACK_STATUSES)
    return {
        "database": conf.get("database"),
        "statuses": statuses,
        "rank": {s: i for i, s in enumerate(statuses)},
        "working": tuple(conf.get("working") or ("pass", "skip")),
    }


def get_database(datasette):
    name = config(datasette)["database"]
    if name and name in datasette.databases:
        return datasette.databases[name]
    for db in datasette.databases.values():
        if db.name != "_internal" and not db.is_memory:
            return db
    raise NotFound("no database is being served")


async def optional_views(db):
    names = set(await db.table_names()) | set(await db.view_names())
    return {name for name in OPTIONAL_VIEWS if name in names}


def order_dtypes(dtypes):
    known = [d for d in DTYPE_ORDER if d in dtypes]
    return known + sorted(set(dtypes) - set(known))


def op_pattern(text):
    """A LIKE pattern from the op filter: a glob if it has * or ?, else a substring."""
    text = (text or "").strip()
    if not text:
        return ""
    if "*" in text or "?" in text:
        return text.replace("*", "%").replace("?", "_")
    return f"%{text}%"


def run_label(run):
    os_part = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    device = run.get("device") or "?"
    if run.get("device_name") and run["device_name"] != device:
        device = f"{device} ({run['device_name']})"
    return f"torch {run.get('torch_version')} · {os_part} · {device}"


def url(datasette, path, **params):
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})
    # Plain str: Datasette's URL strings make every str method slow (a dir() per call).
    return str(datasette.urls.path(path)) + (f"?{query}" if query else "")


def cases_url(datasette, db, run_id, op_id, dtype):
    return url(datasette, f"/{db.name}/cell_cases", run_id=run_id, op_id=op_id, dtype=dtype)


def op_url(datasette, op_id):
    return str(datasette.urls.path("/-/op/" + urllib.parse.quote(op_id, safe="")))


def status_class(value):
    """The CSS class of a status: only a known status word becomes a class, so a
    status string from a merged or hand-edited database can never break out of
    the attribute (it is shown escaped as text instead)."""
    return f"st-{value}" if value in FALLBACK_STATUSES else "st-unknown"


def status_badge(value):
    return Markup(f'<span class="st {status_class(value)}">{html.escape(str(value))}</span>')


async def render(datasette, request, template, context):
    conf = config(datasette)
    context = dict(context, statuses=conf["statuses"])
    body = await datasette.render_template(template, context, request=request)
    return Response.html(body)


def pick_run(runs, params):
    """The run a page shows: ?run=ID, or the newest matching ?torch=&os=&device= prefixes."""
    if params.get("run"):
        for run in runs:
            if run["id"] == params["run"]:
                return run
        raise NotFound(f"no run {params['run']}")

    def matches(value, prefix):
        return not prefix or (value or "") == prefix or (value or "").startswith(prefix + ".") \
            or (value or "").startswith(prefix + "+")
    wanted_device = params.get("device")
    if not any(params.get(k) for k in ("torch", "os", "device")):
        # By default the newest run on a real target: CPU runs only calibrate.
        runs = [r for r in runs if r["device"] != "cpu"] + [r for r in runs if r["device"] == "cpu"]
    for run in runs:  # newest first
        if (matches(run["torch_version"], params.get("torch", ""))
                and matches(run["os_version"], params.get("os", ""))
                and (not wanted_device or run["device"] == wanted_device)):
            return run
    return None

# ---------------------------------------------------------------------------- pages


def matrix_row(op_id, href, cells):
    """One matrix row as HTML. Built here, not in Jinja: async Jinja costs ~40 µs a
    cell, which on a full sweep (9,000 cells) is most of the page's time."""
    esc = html.escape
    parts = [f'<tr><th class="mp-op"><a href="{esc(href)}">{esc(op_id)}</a></th>']
    for cell in cells:
        if cell is None:
            parts.append('<td class="mp-none"></td>')
        else:
            status, link, title = cell
            parts.append(f'<td class="{status_class(status)}"><a href="{esc(link)}" '
                         f'title="{esc(title)}">{esc(str(status))}</a></td>')
    parts.append("</tr>")
    return "".join(parts)


async def matrix_page(datasette, request):
    db = get_database(datasette)
    conf = config(datasette)
    args = request.args
    runs = [dict(r) for r in await db.execute(SQL_RUNS)]
    views = await optional_views(db)
    declared_choices = []
    if "declared" in views:
        declared_choices = [dict(r) for r in await db.execute(SQL_DECLARED_CHOICES)]
    choice = args.get("run", "")
    op_like = op_pattern(args.get("op"))
    wanted = [s for s in args.getlist("status") if s in conf["statuses"]]
    run = declared = None
    if choice.startswith("declared:"):
        _, torch, device = choice.split(":", 2)
        declared = {"torch_version": torch, "device": device}
        rows = await db.execute(SQL_DECLARED_MATRIX, {"torch": torch, "device": device,
                                                      "op": op_like})
    else:
        run = pick_run(runs, {"run": choice, "torch": args.get("torch", ""),
                              "os": args.get("os", ""), "device": args.get("device", "")})
        counts = ", ".join(f"n_{s}" for s in conf["statuses"])
        rows = []
        if run:
            rows = await db.execute(SQL_MATRIX.format(counts=counts),
                                    {"run_id": run["id"], "op": op_like})
    cells, dtypes = {}, set()
    for row in rows:
        cells.setdefault(row["op_id"], {})[row["dtype"]] = row
        dtypes.add(row["dtype"])
    dtypes = order_dtypes(dtypes)
    totals = dict.fromkeys(conf["statuses"], 0)
    # Cell links share one prefix: built once, not per cell (9,000 cells on a full sweep).
    if run:
        prefix = cases_url(datasette, db, run["id"], "", "") + "&op_id="
    else:
        prefix = url(datasette, f"/{db.name}/declared", torch_version=declared["torch_version"],
                     device=declared["device"]) + "&op_id="
    quote = urllib.parse.quote
    table = []
    for op_id in sorted(cells):
        by_dtype = cells[op_id]
        if wanted and not any(c["status"] in wanted for c in by_dtype.values()):
            continue
        row_cells = []
        op_prefix = prefix + quote(op_id, safe="") + "&dtype="
        for dtype in dtypes:
            cell = by_dtype.get(dtype)
            if cell is None:
                row_cells.append(None)
                continue
            totals[cell["status"]] = totals.get(cell["status"], 0) + 1
            if run:
                tally = ", ".join(f"{cell['n_' + s]} {s}" for s in conf["statuses"]
                                  if cell["n_" + s])
                title = f"{op_id} {dtype}: {cell['status']} ({tally})"
            else:
                title = f"{op_id} {dtype}: declared {cell['status']} ({cell['source'] or ''})"
            row_cells.append((cell["status"], op_prefix + quote(dtype), title))
        table.append(matrix_row(op_id, op_url(datasette, op_id), row_cells))
    return await render(datasette, request, "mpsprobe_matrix.html", {
        "title": "Compatibility matrix", "db": db.name, "runs": runs, "run": run,
        "run_label": run_label, "declared": declared, "declared_choices": declared_choices,
        "choice": choice or (run["id"] if run else ""), "op_filter": args.get("op", ""),
        "wanted": wanted, "dtypes": dtypes, "table": table, "totals": totals,
        "table_html": Markup("\n".join(table)),
        "compare_url": url(datasette, "/-/compare", b=run["id"]) if run else None,
    })


def history_notes(entries, working, os_word):
    """MDN-style one-liners per (device, dtype): 'works since torch 2.3', 'fallback on macOS < 14.4'."""
    notes = []
    groups = {}
    for e in entries:
        groups.setdefault((e["device"], e["dtype"]), []).append(e)
    for (device, dtype), items in sorted(groups.items()):
        by_torch = {}
        for e in items:
            by_torch.setdefault(e["torch_version"], []).append(e)
        versions = sorted(by_torch, key=version_key)
        ok = [all(e["status"] in working for e in by_torch[v]) for v in versions]
        latest = versions[-1]
        if ok[-1]:
            since = versions[0]
            for v, good in zip(reversed(versions), reversed(ok)):
                if not good:
                    break
                since = v
            text = (f"works since torch {since}" if not all(ok)
                    else f"works in every measured torch ({versions[0]}–{latest})"
                    if len(versions) > 1 else f"works in torch {latest}")
        else:
            bad = sorted({e["status"] for e in by_torch[latest] if e["status"] not in working})
            text = f"{'/'.join(bad)} in torch {latest}"
        # OS split within the newest torch version: the oldest OS from which it always works.
        newest = sorted(by_torch[latest], key=lambda e: version_key(e["os_version"]))
        flags = [e["status"] in working for e in newest]
        if any(flags) and not all(flags) and flags[flags.index(True):] == [True] * (
                len(flags) - flags.index(True)):
            first_ok = newest[flags.index(True)]
            bad = sorted({e["status"] for e in newest[:flags.index(True)]})
            text += (f"; {'/'.join(bad)} on {first_ok['os_name'] or os_word} "
                     f"< {first_ok['os_version']}")
        notes.append({"device": device, "dtype": dtype, "text": text, "ok": ok[-1]})
    return notes


async def op_page(datasette, request):
    db = get_database(datasette)
    conf = config(datasette)
    op_id = urllib.parse.unquote(request.url_vars["op_id"])
    op = [dict(r) for r in await db.execute("SELECT * FROM ops WHERE id = :id", {"id": op_id})]
    views = await optional_views(db)
    runs = {r["id"]: dict(r) for r in await db.execute(SQL_RUNS)}
    sql = SQL_OP_HISTORY_VIEW if "op_history" in views else SQL_OP_HISTORY
    measured = [dict(r) for r in await db.execute(sql, {"op_id": op_id})]
    declared = []
    if "declared" in views:
        declared = [dict(r) for r in await db.execute(SQL_OP_DECLARED, {"op_id": op_id})]
    speed = await op_speed(datasette, db, op_id)
    if not op and not measured and not declared and not speed:
        raise NotFound(f"no op {op_id} in this database")
    # One history row per (device, torch, OS): the newest run of that configuration.
    rows, entries = {}, []
    measured = [m for m in measured if m["run_id"] in runs]
    for m in sorted(measured, key=lambda m: runs[m["run_id"]]["started"] or ""):
        run = runs[m["run_id"]]
        key = (run["device"], run["torch_version"], run["os_name"], run["os_version"])
        if key not in rows or rows[key]["run"]["id"] != run["id"]:
            rows[key] = {"run": run, "cells": {}}  # runs come oldest first: newest wins
        rows[key]["cells"][m["dtype"]] = m["status"]
    for row in rows.values():
        for dtype, status in row["cells"].items():
            entries.append(dict(row["run"], dtype=dtype, status=status))
    dtypes = order_dtypes({e["dtype"] for e in entries} | {d["dtype"] for d in declared})
    ordered = sorted(rows.values(), key=lambda r: (
        r["run"]["device"], version_key(r["run"]["torch_version"]),
        version_key(r["run"]["os_version"])), reverse=True)
    history = [{
        "label": run_label(r["run"]),
        "matrix_url": url(datasette, "/-/matrix", run=r["run"]["id"], op=op_id),
        "cells": [(r["cells"].get(d), cases_url(datasette, db, r["run"]["id"], op_id, d))
                  for d in dtypes],
    } for r in ordered]
    firsts = []
    if "op_firsts" in views:
        firsts = [dict(r) for r in await db.execute(SQL_OP_FIRSTS, {"op_id": op_id})]
    return await render(datasette, request, "mpsprobe_op.html", {
        "title": op_id, "db": db.name, "op": op[0] if op else None, "op_id": op_id,
        "dtypes": dtypes, "history": history, "declared": declared, "firsts": firsts, "speed": speed,
        "notes": history_notes(entries, conf["working"], "OS"),
        "fallbacks_url": url(datasette, f"/{db.name}/results", op_id=op_id,
                             status="fallback"),
    })


async def op_speed(datasette, db, op_id):
    """The op's speed section (site/plugins/speed.py: ladder charts), Markup; "" without it."""
    from datasette.plugins import pm
    plugin = pm.get_plugin("speed.py")
    if plugin is None or not hasattr(plugin, "op_section"):
        return ""
    return Markup(await plugin.op_section(datasette, db, op_id))


def change_kind(before, after, conf):
    working, rank = conf["working"], conf["rank"]
    if before is None:
        return "added"
    if after is None:
        return "removed"
    if before in working and after not in working:
        return "regression"
    if after in working and before not in working:
        return "fix"
    if before not in working and after not in working:
        return "regression" if rank[after] > rank[before] else "fix"
    return "changed"


async def compare_page(datasette, request):
    db = get_database(datasette)
    conf = config(datasette)
    runs = [dict(r) for r in await db.execute(SQL_RUNS)]
    by_id = {r["id"]: r for r in runs}
    b = by_id.get(request.args.get("b")) or (runs[0] if runs else None)
    a = by_id.get(request.args.get("a"))
    if a is None and b is not None:  # default: the previous run on the same device
        older = [r for r in runs if r["id"] != b["id"] and (r["started"] or "") <= (b["started"] or "")]
        same = [r for r in older if r["device"] == b["device"]]
        a = (same or older or [None])[0]
    changes = []
    if a and b:
        for row in await db.execute(SQL_COMPARE, {"a": a["id"], "b": b["id"]}):
            kind = change_kind(row["status_a"], row["status_b"], conf)
            changes.append({
                "op_id": row["op_id"], "dtype": row["dtype"], "kind": kind,
                "op_url": op_url(datasette, row["op_id"]),
                "a": (row["status_a"], cases_url(datasette, db, a["id"], row["op_id"], row["dtype"])),
                "b": (row["status_b"], cases_url(datasette, db, b["id"], row["op_id"], row["dtype"])),
            })
    order = ("regression", "fix", "changed", "added", "removed")
    changes.sort(key=lambda c: order.index(c["kind"]))  # stable: op, dtype within a kind
    kinds = [k for k in order
             if any(c["kind"] == k for c in changes)]
    shown = request.args.get("kind")
    return await render(datasette, request, "mpsprobe_compare.html", {
        "title": "Compare runs", "db": db.name, "runs": runs, "a": a, "b": b,
        "run_label": run_label, "kinds": kinds, "shown": shown,
        "counts": {k: sum(c["kind"] == k for c in changes) for k in kinds},
        "changes": [c for c in changes if not shown or c["kind"] == shown],
    })

# ---------------------------------------------------------------------------- hooks


@hookimpl
def register_routes():
    return [
        (r"^/-/matrix$", matrix_page),
        (r"^/-/op/(?P<op_id>[^/]+)$", op_page),
        (r"^/-/compare$", compare_page),
    ]


@hookimpl
def prepare_connection(conn):
    conn.create_function("mpsprobe_version_key", 1, version_key_sql, deterministic=True)


@hookimpl
def canned_queries(datasette, database):
    db = get_database(datasette)
    if database != db.name:
        return {}

    async def queries():
        chosen = dict(CANNED_QUERIES)
        present = await optional_views(db)
        if "op_firsts" in present:
            chosen["first_pass_version"] = dict(chosen["first_pass_version"],
                                                sql=SQL_FIRST_PASS_FROM_VIEW)
        if "speed_crossovers" in present and \
                (await db.execute("SELECT 1 FROM speed_crossovers WHERE rungs > 0 LIMIT 1")).rows:
            chosen["slowest_vs_cpu"] = dict(chosen["slowest_vs_cpu"], **SLOWEST_FROM_LADDERS)
        if "results_fts" in present:
            chosen["search"] = dict(chosen["search"], sql=SQL_SEARCH_FTS,
                                    description="Full-text search over op names, the aten ops "
                                                "they dispatch, fallbacks and error messages.")
        return {name: dict(q, sql=q["sql"].strip()) for name, q in chosen.items()}
    return queries


@hookimpl
def render_cell(value, column, table, datasette):
    """Colour every status, in every table, view and query; link op ids to their history."""
    if not isinstance(value, str):
        return None
    if "status" in column and value in config(datasette)["statuses"]:
        return status_badge(value)
    if column == "op_id" and (table is None or table.startswith("op_")):
        return Markup(f'<a href="{op_url(datasette, value)}">{html.escape(value)}</a>')
    return None


@hookimpl
def extra_css_urls(datasette):
    return [datasette.urls.path("/mpsprobe-static/site.css")]


def plugin_page_path(filename):
    """The page route of another plugin in site/plugins/ (e.g. check_ops.py), if loaded."""
    from datasette.plugins import pm
    plugin = pm.get_plugin(filename)
    if plugin is None or not hasattr(plugin, "register_routes"):
        return None
    for regex, _ in plugin.register_routes() or []:
        path = regex.strip("^$")
        if "(" not in path:
            return path
    return None


@hookimpl
def extra_template_vars(datasette):
    db = get_database(datasette)
    links = [("Matrix", "/-/matrix"), ("Compare", "/-/compare"),
             ("Search", f"/{db.name}/search"), ("Fallbacks", f"/{db.name}/fallbacks"),
             ("Check ops", plugin_page_path("check_ops.py") or f"/{db.name}/check_ops"),
             ("Findings", plugin_page_path("findings.py")),
             ("Speed", plugin_page_path("speed.py")),
             ("Queries", f"/{db.name}#queries"), ("Runs", f"/{db.name}/runs")]
    return {"mpsprobe_nav": [(label, datasette.urls.path(path)) for label, path in links if path],
            "status_class": status_class}
