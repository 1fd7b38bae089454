"""The compat grid: ops as rows, torch versions as columns, as MDN and caniuse draw it.

Columns are grouped by where they were measured: device, OS and OS major
version, bare metal apart from virtualised, and on macOS the chip (MPS bugs
are per chip: an M1's results are never pooled with an M4's). Within a group each torch version
is one column, answered by its newest run; a declared version of the device
with no measured column of its own gets a declared-only column. A cell is the
worst status over the op's cases (one dtype, or all when none is asked for),
with how many cases work ("k of n") and the reason kind of its worst cases.
Where a column measured nothing for an op, what PyTorch declares stands in,
marked as declared.

The compiled layer (pass `compiled`: each op's forward through torch.compile)
is drawn by the same rules from the compiled cases alone, with only the runs
that compiled ops as columns and nothing declared standing in; a fallback there
is the compiler leaving the op to eager on the target, and its note says so.

`since` / `until` of a row and group: the torch version from which it has
worked in every later column, and the last version it worked in before it
stopped working.
"""
import json
from collections import defaultdict

from mpsprobe.db.views import in_list, quoted, status_rank, worst_status
from mpsprobe.versions import major_version, same_release, sort_key
from mpsprobe.vocabulary import (COMPILED, CRASH_NOT_REPRODUCED, FALLBACK, FORWARD, NO_SUPPORT, PARTIAL,
                                  PASS_COLUMN, RANK, SKIP, SUPPORTED, UNKNOWN_SUPPORT, WORKING)
from . import declared as declared_q, present, rows
from .blame import COMPILED_FALLBACK, LEFT_TO_EAGER
from .op import order_dtypes
from .runs import VIRTUAL_MACHINE, device_rank, has_pass, list_runs, machine_kind


def group_key(run):
    """(device kind, OS, OS major, virtual machine?, chip on macOS): a column group
    (runs.machine_kind decides what is virtual)."""
    chip = run.get("chip") if run.get("os_name") == "macOS" else None
    return ((run.get("device") or "?").split(":", 1)[0], run.get("os_name") or "",
            major_version(run.get("os_version")) or "", machine_kind(run) == VIRTUAL_MACHINE, chip or "")


def group_label(key):
    device, os_name, os_major, virtual, chip = key
    where = " ".join(x for x in (os_name, os_major) if x)
    return f"{device} · {where}" + (f" · {VIRTUAL_MACHINE}" if virtual else "") + (f" · {chip}" if chip else "")


def columns(conn, pass_=FORWARD):
    """[{"group", "label", "torch_version", "run_id" or None, "declared"}] in display order.
    The compiled layer (`pass_` COMPILED) has only the runs that compiled ops, and no
    declared stand-ins: PyTorch declares nothing about compiled forms."""
    newest = {}
    compiled = pass_ == COMPILED
    for run in list_runs(conn, with_results_only=True):
        if (run.get("source") or "opinfo") != "opinfo":
            continue
        if compiled and not has_pass(conn, run, COMPILED):
            continue
        key = (group_key(run), run["torch_version"])
        if key not in newest or (run["started"] or "") > (newest[key]["started"] or ""):
            newest[key] = run
    found = [{"group": g, "label": group_label(g), "torch_version": v, "run_id": r["id"],
              "declared": None} for (g, v), r in newest.items()]
    if compiled:
        return _ordered(found)
    for col in found:  # the declaration of the same release, for cells nothing measured
        device = declared_q.declared_device(col["group"][0])
        version = device and declared_q.version_for(conn, device, col["torch_version"])
        col["declared"] = (version, device) if version else None
    measured = defaultdict(set)
    for col in found:
        measured[declared_q.declared_device(col["group"][0])].add(col["torch_version"])
    for device in ("mps", "cuda"):
        for version in declared_q.versions(conn, device):
            if not same_release(measured[device], version):
                found.append({"group": (device, "declared", "", False, ""), "torch_version": version,
                              "label": f"{device} · declared, not measured", "run_id": None,
                              "declared": (version, device)})
    return _ordered(found)


def _ordered(found):
    """Columns in display order: MPS groups first, declared-only last, oldest torch first."""
    found.sort(key=lambda c: sort_key(c["torch_version"]))
    found.sort(key=lambda c: (device_rank(c["group"][0]), c["group"][1] == "declared",
                              c["group"][1], -int(c["group"][2] or 0) if str(c["group"][2]).isdigit()
                              else 0, c["group"][3], c["group"][4]))
    return found


def op_ids(conn, op_like="", dtypes=(), pass_=None):
    """Op ids with a result in a sweep (in one of `dtypes` and pass `pass_`, where given)
    or a declaration (LIKE `op_like`), through the indexes: the grid counts exactly
    the ops it has rows for. A model replay's aten ops (`check --run`) have no
    column, so no row."""
    sweeps_only = ("AND coalesce(runs.source, 'opinfo') = 'opinfo'"
                   if "source" in {r[1] for r in conn.execute("PRAGMA table_info(runs)")} else "")
    in_dtypes, dtype_args = _dtype_clause(dtypes)
    in_pass, pass_args = (f"AND results.{PASS_COLUMN} = ?", [pass_]) if pass_ else ("", [])
    found = {r[0] for r in conn.execute(
        "SELECT id FROM ops WHERE (? = '' OR id LIKE ?) "
        "AND EXISTS (SELECT 1 FROM results JOIN runs ON runs.id = results.run_id "
        f"WHERE results.op_id = ops.id {in_dtypes.replace('dtype', 'results.dtype')} {in_pass} "
        f"{sweeps_only})", [op_like, op_like, *dtype_args, *pass_args])}
    if "declared" in present(conn) and pass_ != COMPILED:   # nothing is declared of compiled forms
        found |= {r[0] for r in conn.execute(
            f"SELECT DISTINCT op_id FROM declared WHERE (? = '' OR op_id LIKE ?) {in_dtypes}",
            [op_like, op_like, *dtype_args])}
    return sorted(found)


def _dtype_clause(dtypes):
    return (f"AND dtype IN ({', '.join('?' for _ in dtypes)})", list(dtypes)) if dtypes else ("", [])


def _measured(conn, run_ids, op_like, dtypes, pass_, only=None):
    """{(run_id, op_id): {dtype: {"status", "n", "k", "reason_kind", "min_macos"}}}: each
    dtype's worst status over its cases, and the reason of its worst cases."""
    if not run_ids or only == []:
        return {}
    # With a page of ops, the op index answers (`+run_id`: not the run's whole key range).
    some = f"AND op_id IN ({', '.join('?' for _ in only)})" if only is not None else ""
    in_dtypes, dtype_args = _dtype_clause(dtypes)
    have = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    # The reason of the worst cases, not of any failing one: "rank|kind|macOS", the highest rank wins.
    why = (f"max(CASE WHEN status NOT IN {in_list(WORKING)} THEN printf('%02d|%s|%s', {status_rank()}, "
           "coalesce(reason_kind, ''), coalesce(min_macos, '')) END)" if "reason_kind" in have else "NULL")
    # Cases whose verdict is their second run's, after a worker died in them once (pool's crash rule).
    reruns = (f"sum(instr(coalesce(notes, ''), {quoted(json.dumps(CRASH_NOT_REPRODUCED))}) > 0)"
              if "notes" in have else "0")
    found = defaultdict(dict)
    for r in rows(conn, f"""
        SELECT run_id, op_id, dtype, {worst_status()} AS status, count(*) AS n,
               sum(status IN {in_list(WORKING)}) AS k, {why} AS why, {reruns} AS reruns
        FROM results WHERE {'+' if only is not None else ''}run_id IN ({', '.join('?' for _ in run_ids)})
          AND {PASS_COLUMN} = ? AND (? = '' OR op_id LIKE ?) {in_dtypes} {some}
        GROUP BY run_id, op_id, dtype""", [*run_ids, pass_, op_like, op_like, *dtype_args,
                                           *(only or [])]):
        _, kind, macos = (r.pop("why") or "||").split("|")
        r.update(reason_kind=kind or None, min_macos=macos or None)
        found[r["run_id"], r["op_id"]][r.pop("dtype")] = r
    return found


def _declared(conn, wanted, op_like, dtypes, only=None):
    """{((version, device), op_id): {dtype: {"status"}}}: what PyTorch declares per dtype."""
    if not wanted or "declared" not in present(conn) or only == []:
        return {}
    some = f"AND op_id IN ({', '.join('?' for _ in only)})" if only is not None else ""
    in_dtypes, dtype_args = _dtype_clause(dtypes)
    found = defaultdict(dict)
    # One pass over the page's ops (the op_id index), every wanted release at once:
    # a query per release read the same ops' rows once per release.
    devices = sorted({device for _, device in wanted})
    # (torch_version, device, op_id, dtype) is the table's key: one status each.
    for version, device, op_id, dtype, status in conn.execute(
            f"""SELECT torch_version, device, op_id, dtype, status FROM declared
                WHERE device IN ({', '.join('?' for _ in devices)}) AND (? = '' OR op_id LIKE ?)
                  {in_dtypes} {some}""", [*devices, op_like, op_like, *dtype_args, *(only or [])]):
        if (version, device) in wanted:
            found[(version, device), op_id][dtype] = {"status": status, "reason_kind": None, "min_macos": None}
    return found


def _ranges(cells):
    """(since, until) over one group's cells, oldest column first: from which version the
    op has been supported in every later column, or the last version it was supported
    before it stopped. Only where the group measured more than one version: one
    measurement says nothing about "since"."""
    measured = [(c["torch_version"], c["answer"] == SUPPORTED) for c in cells
                if c and not c.get("declared_only")]
    if len(measured) < 2 or not any(ok for _, ok in measured):
        return None, None
    if measured[-1][1]:
        since = measured[-1][0]
        for version, ok in reversed(measured):
            if not ok:
                break
            since = version
        return since, None
    last_ok = [v for v, ok in measured if ok][-1]
    return None, last_ok


# What a whole device lacks is said once, on its columns, not as a ✗ on every op:
# MPS has no float64 ("Cannot convert a MPS Tensor to float64 dtype as the MPS
# framework doesn't support float64"). Left out of a cell unless asked for by name.
DEVICE_LACKS = {"mps": {"float64": "MPS has no float64: the framework refuses it for every op "
                                   "(PyTorch: \"the MPS framework doesn't support float64\"). "
                                   "Cells leave it out unless float64 is picked."}}


def dtypes(conn):
    """Every dtype measured or declared, in the matrix's order: the grid's chips (a cell's
    note can name a dtype only declared, such as complex128)."""
    found = {r[0] for r in conn.execute("SELECT DISTINCT dtype FROM cases")}
    if "declared" in present(conn):
        found |= {r[0] for r in conn.execute("SELECT DISTINCT dtype FROM declared")}
    return order_dtypes(found - {None})


def device_lacks(device):
    """{dtype: footnote} of what a device kind cannot do at all (a run's device, or a declaration's)."""
    return DEVICE_LACKS.get(declared_q.declared_device(device) or device, {})


def _note(dtype, d):
    if d["status"] in WORKING:
        return None
    if d.get("reason_kind") == "macos_version" and d.get("min_macos"):
        return f"{dtype}: needs macOS {d['min_macos']}"
    if d.get("reason_kind") == COMPILED_FALLBACK.name:   # still on the target: not a CPU fallback
        return f"{dtype}: {LEFT_TO_EAGER}"
    return f"{dtype}: {d['status']}" + (f" ({d['reason_kind']})" if d.get("reason_kind") else "")


def support(by_dtype):
    """One cell's answer from its dtypes' worst statuses: {"answer", "k" dtypes working,
    "n" dtypes with a verdict, "status" (the worst), "notes": what is not plain support}."""
    known = {d: v for d, v in by_dtype.items() if v["status"] != SKIP}
    works = [d for d, v in known.items() if v["status"] in WORKING]
    fallback = [d for d, v in known.items() if v["status"] == FALLBACK]
    if not known:
        answer = UNKNOWN_SUPPORT
    elif len(works) == len(known):
        answer = SUPPORTED
    elif works or fallback:
        answer = PARTIAL
    else:
        answer = NO_SUPPORT
    ordered = order_dtypes(by_dtype)
    notes = [n for d in ordered if d in known for n in [_note(d, known[d])] if n]
    notes += [f"{d}: {n} case(s) killed a worker once and ran to this verdict in another, where the "
              "death did not recur" for d in ordered if (n := by_dtype[d].get("reruns"))]
    unknown = [d for d in ordered if d not in known]
    if unknown and known:
        notes.append(f"no verdict in {', '.join(unknown)}")
    worst_dtype = max(by_dtype, key=lambda d: status_rank_of(by_dtype[d]["status"]))
    return {"answer": answer, "k": len(works), "n": len(known), "status": by_dtype[worst_dtype]["status"],
            "reason_kind": by_dtype[worst_dtype].get("reason_kind"),
            "min_macos": by_dtype[worst_dtype].get("min_macos"),
            "dtypes": {d: by_dtype[d]["status"] for d in ordered}, "notes": notes}


def status_rank_of(status):
    return RANK.get(status, -1)


def grid(conn, op_like="", dtype=(), pass_=FORWARD, statuses=(), limit=400, offset=0, ops=None):
    """{"columns", "groups": [(label, n columns)], "footnotes": {label: [text]}, "rows":
    [{"op_id", "cells", "ranges"}], "total": rows before paging}. `dtype`: the dtypes in
    view (one name or several; none: every dtype, less what a device lacks). A cell:
    {"answer", "k" of "n" dtypes working, "dtypes": {dtype: worst status}, "notes",
    "status", "reason_kind", "min_macos" (of its worst dtype), "cases", "run_id",
    "torch_version", "declared_only"} or None. `ops`: these op ids only (a search's page)."""
    dtypes = tuple([dtype] if isinstance(dtype, str) else dtype or ())
    dtypes = tuple(d for d in dtypes if d)
    cols = columns(conn, pass_)
    # Without a status filter a page needs only its own ops: they are picked
    # first, so a page of a 20-run database reads a page of ops, not every result.
    only = list(ops) if ops is not None else None if statuses else op_ids(conn, op_like, dtypes, pass_)
    total = None if statuses else len(only)
    if only is not None:
        only = only[offset:offset + limit]
    measured = _measured(conn, [c["run_id"] for c in cols if c["run_id"]], op_like, dtypes, pass_,
                         only)
    declared = _declared(conn, {c["declared"] for c in cols if c["declared"]}, op_like, dtypes, only)
    shown = sorted({op for _, op in measured} | {op for _, op in declared})
    footnotes = {}
    lacks = {}
    for col in cols:
        lacked = {} if dtypes else device_lacks(col["group"][0])
        lacks[col["label"]] = lacked
        if lacked:
            footnotes[col["label"]] = list(lacked.values())
    table = []
    for op_id in shown:
        cells = []
        for col in cols:
            lacked = lacks[col["label"]]
            by_dtype = col["run_id"] and measured.get((col["run_id"], op_id))
            declared_only = False
            if not by_dtype and col["declared"]:
                by_dtype, declared_only = declared.get((col["declared"], op_id)), True
            by_dtype = {d: v for d, v in (by_dtype or {}).items() if d not in lacked}
            if not by_dtype:
                cells.append(None)
                continue
            cell = support(by_dtype)
            cell.update(run_id=None if declared_only else col["run_id"], declared_only=declared_only,
                        torch_version=col["torch_version"],
                        cases=None if declared_only else sum(v["n"] for v in by_dtype.values()))
            cells.append(cell)
        if statuses and not any(c and set(c["dtypes"].values()) & set(statuses) for c in cells):
            continue
        if not any(cells):
            continue
        ranges = {}
        for label in dict.fromkeys(c["label"] for c in cols):
            ranges[label] = _ranges([c for c, col in zip(cells, cols) if col["label"] == label])
        table.append({"op_id": op_id, "cells": cells, "ranges": ranges})
    groups = []
    for col in cols:
        if groups and groups[-1][0] == col["label"]:
            groups[-1][1] += 1
        else:
            groups.append([col["label"], 1])
    answer = {"columns": cols, "groups": [tuple(g) for g in groups], "footnotes": footnotes}
    if only is not None:   # already one page
        return dict(answer, total=total, rows=table)
    return dict(answer, total=len(table), rows=table[offset:offset + limit])


def newest_answers(grid_answer):
    """{op_id: [{"where", "torch_version", cell}]}: per op, each column group's newest
    column that has a cell, in the grid's order (MPS first): a row's summary on a search page."""
    cols = grid_answer["columns"]
    summary = {}
    for row in grid_answer["rows"]:
        newest = {}
        for col, cell in zip(cols, row["cells"]):
            if cell:
                newest[col["label"]] = dict(cell, where=col["label"])
        summary[row["op_id"]] = list(newest.values())
    return summary


def op_answers(conn, op_id, pass_=FORWARD):
    """The op page's opening: [{"label", "device", "declared", "cells": [cell with
    "torch_version"]}] per column group, as the grid answers them (MPS groups first),
    and the groups' footnotes. Empty groups are left out."""
    found = grid(conn, pass_=pass_, ops=[op_id])
    groups = {}
    for row in found["rows"]:
        for col, cell in zip(found["columns"], row["cells"]):
            group = groups.setdefault(col["label"], {
                "label": col["label"], "device": declared_q.declared_device(col["group"][0]) or col["group"][0],
                "declared": col["group"][1] == "declared", "cells": []})
            if cell:
                group["cells"].append(cell)
    return {"groups": [g for g in groups.values() if g["cells"]], "footnotes": found["footnotes"]}


def compiled_measured(conn):
    """Whether any sweep in the store compiled ops (the compiled layer has something to show)."""
    return bool(columns(conn, COMPILED))


def support_by_release(conn, pass_=FORWARD):
    """The home page's chart: per column group (MPS first), per release, how many ops
    work in at least one dtype (supported or partial, the grid's answers over every
    dtype less what the device lacks) of the ops it answers for.
    [{"label", "device", "declared", "points": [{"torch_version", "working", "ops"}]}]."""
    groups = {}
    for col in columns(conn):
        lacked = tuple(device_lacks(col["group"][0]))
        skip = f"AND dtype NOT IN ({', '.join('?' for _ in lacked)})" if lacked else ""
        if col["run_id"]:
            found = conn.execute(f"""
                SELECT count(*), sum(works) FROM (
                    SELECT max(status IN ({', '.join('?' for _ in WORKING + (FALLBACK,))})
                               AND status != ?) AS works
                    FROM results WHERE run_id = ? AND {PASS_COLUMN} = ? {skip} GROUP BY op_id)""",
                                 [*WORKING, FALLBACK, SKIP, col["run_id"], pass_, *lacked]).fetchone()
        else:
            version, device = col["declared"]
            found = conn.execute(f"""
                SELECT count(*), sum(works) FROM (
                    SELECT max(status IN ({', '.join('?' for _ in WORKING + (FALLBACK,))})
                               AND status != ?) AS works
                    FROM declared WHERE torch_version = ? AND device = ? {skip} GROUP BY op_id)""",
                                 [*WORKING, FALLBACK, SKIP, version, device, *lacked]).fetchone()
        ops, working = found[0] or 0, found[1] or 0
        if not ops:
            continue
        group = groups.setdefault(col["label"], {
            "label": col["label"], "device": declared_q.declared_device(col["group"][0]) or col["group"][0],
            "declared": col["run_id"] is None, "points": []})
        group["points"].append({"torch_version": col["torch_version"], "working": working, "ops": ops})
    return list(groups.values())
