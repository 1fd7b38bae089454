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

`since` / `until` of a row and group: the torch version from which it has
worked in every later column, and the last version it worked in before it
stopped working.
"""
from collections import defaultdict

from mpsprobe.db.views import in_list, status_rank, worst_status
from mpsprobe.versions import major_version, same_release, sort_key
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, WORKING, worst
from . import declared as declared_q, present, rows
from .runs import VIRTUAL_MACHINE, device_rank, list_runs, machine_kind


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


def columns(conn):
    """[{"group", "label", "torch_version", "run_id" or None, "declared"}] in display order."""
    newest = {}
    for run in list_runs(conn, with_results_only=True):
        if (run.get("source") or "opinfo") != "opinfo":
            continue
        key = (group_key(run), run["torch_version"])
        if key not in newest or (run["started"] or "") > (newest[key]["started"] or ""):
            newest[key] = run
    found = [{"group": g, "label": group_label(g), "torch_version": v, "run_id": r["id"],
              "declared": None} for (g, v), r in newest.items()]
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
    found.sort(key=lambda c: sort_key(c["torch_version"]))
    found.sort(key=lambda c: (device_rank(c["group"][0]), c["group"][1] == "declared",
                              c["group"][1], -int(c["group"][2] or 0) if str(c["group"][2]).isdigit()
                              else 0, c["group"][3], c["group"][4]))
    return found


def op_ids(conn, op_like=""):
    """Op ids with a result in a sweep or a declaration (LIKE `op_like`), through the
    indexes. A model replay's aten ops (`check --run`) have no column, so no row."""
    sweeps_only = ("AND coalesce(runs.source, 'opinfo') = 'opinfo'"
                   if "source" in {r[1] for r in conn.execute("PRAGMA table_info(runs)")} else "")
    found = {r[0] for r in conn.execute(
        "SELECT id FROM ops WHERE (? = '' OR id LIKE ?) "
        "AND EXISTS (SELECT 1 FROM results JOIN runs ON runs.id = results.run_id "
        f"WHERE results.op_id = ops.id {sweeps_only})", [op_like, op_like])}
    if "declared" in present(conn):
        found |= {r[0] for r in conn.execute(
            "SELECT DISTINCT op_id FROM declared WHERE (? = '' OR op_id LIKE ?)", [op_like, op_like])}
    return sorted(found)


def _measured(conn, run_ids, op_like, dtype, pass_, only=None):
    if not run_ids or only == []:
        return {}
    # With a page of ops, the op index answers (`+run_id`: not the run's whole key range).
    some = f"AND op_id IN ({', '.join('?' for _ in only)})" if only is not None else ""
    has_kind = "reason_kind" in {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    # The reason of the worst cases, not of any failing one: "rank|kind|macOS", the highest rank wins.
    why = (f"max(CASE WHEN status NOT IN {in_list(WORKING)} THEN printf('%02d|%s|%s', {status_rank()}, "
           "coalesce(reason_kind, ''), coalesce(min_macos, '')) END)" if has_kind else "NULL")
    found = rows(conn, f"""
        SELECT run_id, op_id, {worst_status()} AS status, count(*) AS n,
               sum(status IN {in_list(WORKING)}) AS k, {why} AS why
        FROM results WHERE {'+' if only is not None else ''}run_id IN ({', '.join('?' for _ in run_ids)})
          AND {PASS_COLUMN} = ?
          AND (? = '' OR op_id LIKE ?) AND (? = '' OR dtype = ?) {some}
        GROUP BY run_id, op_id""", [*run_ids, pass_, op_like, op_like, dtype, dtype, *(only or [])])
    for r in found:
        _, kind, macos = (r.pop("why") or "||").split("|")
        r.update(reason_kind=kind or None, min_macos=macos or None)
    return {(r["run_id"], r["op_id"]): r for r in found}


def _declared(conn, wanted, op_like, dtype, only=None):
    if not wanted or "declared" not in present(conn) or only == []:
        return {}
    some = f"AND op_id IN ({', '.join('?' for _ in only)})" if only is not None else ""
    found = defaultdict(list)
    for version, device in wanted:
        for r in rows(conn, f"""SELECT op_id, status FROM declared
                                WHERE torch_version = ? AND device = ? AND (? = '' OR op_id LIKE ?)
                                  AND (? = '' OR dtype = ?) {some}""",
                      [version, device, op_like, op_like, dtype, dtype, *(only or [])]):
            found[(version, device), r["op_id"]].append(r["status"])
    return {key: worst(statuses) or statuses[0] for key, statuses in found.items()}


def _ranges(cells):
    """(since, until) over one group's cells, oldest column first."""
    measured = [(c["torch_version"], c["status"] in WORKING) for c in cells
                if c and not c.get("declared_only")]
    if not measured or not any(ok for _, ok in measured):
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


def grid(conn, op_like="", dtype="", pass_=FORWARD, statuses=(), limit=400, offset=0):
    """{"columns", "groups": [(label, n columns)], "rows": [{"op_id", "cells", "ranges"}],
    "total": rows before paging}. A cell: {"status", "k", "n", "reason_kind", "min_macos" (of the
    worst cases), "run_id", "torch_version", "declared_only"} or None."""
    cols = columns(conn)
    # Without a status filter a page needs only its own ops: they are picked
    # first, so a page of a 20-run database reads a page of ops, not every result.
    only = None if statuses else op_ids(conn, op_like)
    total = None if statuses else len(only)
    if only is not None:
        only = only[offset:offset + limit]
    measured = _measured(conn, [c["run_id"] for c in cols if c["run_id"]], op_like, dtype, pass_,
                         only)
    declared = _declared(conn, {c["declared"] for c in cols if c["declared"]}, op_like, dtype, only)
    shown = sorted({op for _, op in measured} | {op for _, op in declared})
    table = []
    for op_id in shown:
        cells = []
        for col in cols:
            cell = col["run_id"] and measured.get((col["run_id"], op_id))
            if cell:
                cell = dict(cell, torch_version=col["torch_version"], declared_only=False)
            elif col["declared"] and (col["declared"], op_id) in declared:
                cell = {"status": declared[col["declared"], op_id], "k": None, "n": None,
                        "reason_kind": None, "min_macos": None, "run_id": None, "declared_only": True,
                        "torch_version": col["torch_version"]}
            cells.append(cell or None)
        if statuses and not any(c and c["status"] in statuses for c in cells):
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
    if only is not None:   # already one page
        return {"columns": cols, "groups": [tuple(g) for g in groups], "total": total,
                "rows": table}
    return {"columns": cols, "groups": [tuple(g) for g in groups], "total": len(table),
            "rows": table[offset:offset + limit]}
