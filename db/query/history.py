"""Across runs: one op's history, "works since", and what changed between two runs.

"Works since" is decided once, in SQL, by the `op_firsts` view (db/views.py);
`notes` only words its columns.
"""
from mpsprobe.versions import sort_key
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, RANK, WORKING
from mpsprobe.db.views import worst_status
from . import rows, view
from .runs import VIRTUAL_MACHINE

CHANGE_KINDS = ("regression", "fix", "changed", "added", "removed")


def op_history(conn, op_id, pass_=FORWARD):
    """The op's rows, one per (device, torch, OS): the newest run of each, as
    {"run": runs row, "cells": {dtype: status}}, newest configuration first."""
    found = rows(conn, f"""
        SELECT h.dtype, h.status, r.*
        FROM {view(conn, "op_dtype_status")} AS h JOIN runs AS r ON r.id = h.run_id
        WHERE h.op_id = ? AND h.{PASS_COLUMN} = ?
        ORDER BY r.started""", [op_id, pass_])
    configurations = {}
    for row in found:
        dtype, status = row.pop("dtype"), row.pop("status")
        key = (row["device"], row["torch_version"], row["os_name"], row["os_version"])
        if key not in configurations or configurations[key]["run"]["id"] != row["id"]:
            configurations[key] = {"run": row, "cells": {}}  # oldest first: the newest wins
        configurations[key]["cells"][dtype] = status
    ordered = sorted(configurations.values(), key=lambda c: (
        c["run"]["device"], sort_key(c["run"]["torch_version"]), sort_key(c["run"]["os_version"])),
        reverse=True)
    return ordered


def firsts(conn, op_id, pass_=FORWARD):
    return rows(conn, f"""
        SELECT dtype, device, machine_kind, os_name, os_major, first_pass_torch, last_fail_torch,
               passing_since_torch, latest_torch, latest_status, first_seen_torch, n_versions
        FROM {view(conn, "op_firsts")} WHERE op_id = ? AND {PASS_COLUMN} = ?
        ORDER BY device, dtype""",
                [op_id, pass_])


def _note(group):
    if group["latest_status"] in WORKING:
        if group["last_fail_torch"] is None:
            if (group["n_versions"] or 0) > 1:
                return (f"works in every measured torch "
                        f"({group['first_seen_torch']}–{group['latest_torch']})")
            return f"works in torch {group['latest_torch']}"
        return f"works since torch {group['passing_since_torch'] or group['latest_torch']}"
    return f"{group['latest_status']} in torch {group['latest_torch']}"


def notes(conn, op_id, os_word="OS", pass_=FORWARD):
    """MDN-style one-liners per (device, dtype): 'works since torch 2.3',
    'fallback on macOS 13, works on macOS 15', from the op_firsts view."""
    by_pair = {}
    for row in firsts(conn, op_id, pass_):  # a virtual machine's history is told apart
        # In the grid's words: its column groups read "mps · macOS 15 · virtual machine".
        device = row["device"] if row["machine_kind"] != VIRTUAL_MACHINE else f"{row['device']} · {VIRTUAL_MACHINE}"
        by_pair.setdefault((device, row["dtype"]), []).append(row)
    found = []
    for (device, dtype), groups in sorted(by_pair.items()):
        groups.sort(key=lambda g: sort_key(str(g["os_major"] if g["os_major"] is not None else "")))
        newest = groups[-1]
        text = _note(newest)
        ok = newest["latest_status"] in WORKING
        # Within the newest torch, an OS split: the oldest OS from which it always works.
        same = [g for g in groups if g["latest_torch"] == newest["latest_torch"]]
        flags = [g["latest_status"] in WORKING for g in same]
        if any(flags) and not all(flags) and all(flags[flags.index(True):]):
            # Only the OS versions measured: "< 15" would claim 14, which no run saw.
            first_ok = same[flags.index(True)]
            failing = same[:flags.index(True)]
            bad = sorted({g["latest_status"] for g in failing})
            os_name = first_ok["os_name"] or os_word
            majors = ", ".join(str(g["os_major"]) for g in failing)
            text += f"; {'/'.join(bad)} on {os_name} {majors}, works on {os_name} {first_ok['os_major']}"
        found.append({"device": device, "dtype": dtype, "text": text, "ok": ok})
    return found


def change_kind(before, after):
    if before is None:
        return "added"
    if after is None:
        return "removed"
    if before in WORKING and after not in WORKING:
        return "regression"
    if after in WORKING and before not in WORKING:
        return "fix"
    if before not in WORKING and after not in WORKING:
        return "regression" if RANK.get(after, -1) > RANK.get(before, -1) else "fix"
    return "changed"


def statuses(conn, run_id, pass_=FORWARD):
    """{(op, dtype): worst status} of one run, straight from its results (the
    primary key's run_id prefix): one run's roll-up, never every run's."""
    found = conn.execute(f"""
        SELECT op_id, dtype, {worst_status()} FROM results
        WHERE run_id = ? AND {PASS_COLUMN} = ? GROUP BY op_id, dtype""", [run_id, pass_])
    return {(op, dtype): status for op, dtype, status in found}


def changes(conn, run_a, run_b, pass_=FORWARD):
    """The (op, dtype) cells whose status differs between two runs, regressions
    first, then fixes, changes, additions and removals; op and dtype order within."""
    a, b = statuses(conn, run_a, pass_), statuses(conn, run_b, pass_)
    found = [{"op_id": op, "dtype": dtype, "status_a": a.get((op, dtype)),
              "status_b": b.get((op, dtype))}
             for op, dtype in sorted(a.keys() | b.keys()) if a.get((op, dtype)) != b.get((op, dtype))]
    for row in found:
        row["kind"] = change_kind(row["status_a"], row["status_b"])
    found.sort(key=lambda c: CHANGE_KINDS.index(c["kind"]))  # stable: op, dtype within a kind
    return found


def is_sweep(run):
    """A run with op results from the catalogue (not a bench run's ladders, not a model replay)."""
    return bool(run.get("has_results")) and (run.get("source") or "opinfo") == "opinfo"


def device_kind(run):
    return (run.get("device") or "").split(":", 1)[0]


def previous_run(runs, run):
    """The run to compare `run` with by default: a comparable sweep (op results, the
    same device kind), the newest older one, else the oldest newer one; None when
    there is none. `runs`: list_runs()' list."""
    others = [r for r in runs if r["id"] != run["id"] and is_sweep(r)
              and device_kind(r) == device_kind(run)]
    older = sorted((r for r in others if (r["started"] or "") <= (run["started"] or "")),
                   key=lambda r: r["started"] or "", reverse=True)
    # The oldest run has none older: compare it with the one recorded after it.
    newer = sorted((r for r in others if r not in older), key=lambda r: r["started"] or "")
    return (older or newer or [None])[0]