"""Declared vs measured: where a run disagrees with what PyTorch declares.

Three kinds of finding, each worth something upstream:

- `stale_xfail`: declared failing, yet every case passes: an expected failure
  that no longer holds (a pull request removing it);
- `undeclared_failure`: declared to work, yet it fails: a bug nobody listed
  (an issue);
- `composite_passes`: the op's aten function has no MPS kernel, yet it passes
  natively: it decomposes into ops that have one (worth knowing before
  writing a kernel).

And one figure: the agreement rate, the fraction of (op, dtype) pairs where
measured support (pass, mismatch, skip: supported; unsupported or a CPU
fallback: not) agrees with the declared support. Errors, crashes and timeouts
decide nothing and are counted apart. For a CUDA run against OpInfo's CUDA
dtypes this checks the probe itself against PyTorch's own table.
"""
import json
from collections import defaultdict

from mpsprobe.db import declared as declared_db

KINDS = {
    "stale_xfail": "declared failing but passes",
    "undeclared_failure": "declared fine but fails",
    "composite_passes": "no MPS kernel, yet passes natively",
}

MEASURED_SUPPORTED = ("pass", "mismatch", "skip")
MEASURED_UNSUPPORTED = ("unsupported", "fallback")
DECLARED_SUPPORTED = ("pass", "mismatch")
DECLARED_FAILING = ("unsupported", "mismatch", "error")
FAILING = ("fallback", "mismatch", "unsupported", "error", "crash", "timeout")


class FindingsError(Exception):
    """No run, or no declaration to compare it with: one line for the user."""


def declared_device(run_device):
    """Which declaration a run on `run_device` is compared with (None: none fits)."""
    device = (run_device or "").split(":", 1)[0]
    if device in ("mps", "fake-mps"):
        return "mps"
    if device == "cuda":
        return "cuda"
    return None


def pick_run(db, run_id=None):
    if "runs" not in db.table_names():
        raise FindingsError("the database holds no runs")
    if run_id:
        rows = list(db.query("SELECT * FROM runs WHERE id LIKE ? ORDER BY started DESC",
                             [run_id + "%"]))
        if not rows:
            raise FindingsError(f"no run {run_id!r} in the database")
        if len(rows) > 1 and rows[0]["id"] != run_id:
            raise FindingsError(f"{run_id!r} names {len(rows)} runs: give more of the id")
        return rows[0]
    rows = list(db.query("SELECT * FROM runs ORDER BY started DESC LIMIT 1"))
    if not rows:
        raise FindingsError("the database holds no runs")
    return rows[0]


def _support(status, supported, unsupported):
    if status in supported:
        return True
    if status in unsupported:
        return False
    return None


def _measured(db, run_id):
    pairs = {(r["op_id"], r["dtype"]): r for r in db.query(
        "SELECT op_id, dtype, status, n_cases, n_pass FROM op_dtype_status WHERE run_id = ?",
        [run_id])}
    aten_ops = defaultdict(dict)
    reasons = {}
    for r in db.query(
            "SELECT op_id, dtype, status, reason, aten_op, message, aten_ops FROM results "
            "WHERE run_id = ? ORDER BY case_id", [run_id]):
        key = (r["op_id"], r["dtype"])
        for name in json.loads(r["aten_ops"] or "[]"):
            aten_ops[key][name] = None
        if r["status"] == pairs[key]["status"] and key not in reasons:
            reasons[key] = r
    return pairs, aten_ops, reasons


def _kernels(db, version):
    """{base aten name: (has MPS kernel, composite kinds)} for one torch version.

    A function without an MPS kernel that is not composite cannot run natively
    on MPS at all, so only composite ones can be `composite_passes`.
    """
    if not version or "declared_kernels" not in db.table_names():
        return {}
    out = {}
    for r in db.query("SELECT name, max(has_mps) AS has_mps, group_concat(DISTINCT composite) "
                      "AS composite FROM declared_kernels WHERE torch_version = ? GROUP BY name",
                      [version]):
        out[r["name"]] = (bool(r["has_mps"]), r["composite"])
    return out


def _why(reason_row):
    if not reason_row:
        return ""
    parts = [reason_row.get("reason") or ""]
    if reason_row.get("aten_op"):
        parts.append(reason_row["aten_op"])
    return " ".join(p for p in parts if p)


def compare(db, run_id=None, against=None):
    """The findings and agreement rate of one run (default: the newest) as a dict."""
    run = pick_run(db, run_id)
    device = against or declared_device(run["device"])
    if device is None:
        raise FindingsError(
            f"run {run['id'][:12]} is on {run['device']!r}, which declares nothing; "
            "choose a declaration with --against mps or --against cuda")
    version = declared_db.match_version(declared_db.versions(db, device), run["torch_version"])
    if version is None:
        hint = "mpsprobe declared" + (" --opinfo-cuda" if device == "cuda" else "")
        raise FindingsError(
            f"no {device} declarations for torch {run['torch_version']} in the database: "
            f"record them with `{hint}`")
    declared = {(r["op_id"], r["dtype"]): r for r in db.query(
        "SELECT op_id, dtype, status, source, note FROM declared "
        "WHERE torch_version = ? AND device = ?", [version, device])}
    measured, aten_ops, reasons = _measured(db, run["id"])
    kernels = _kernels(db, declared_db.match_version(
        declared_db.kernel_versions(db), run["torch_version"]))
    aten_names = {r["id"]: r["aten_name"] for r in db.query("SELECT id, aten_name FROM ops")}

    findings = []
    agreement = {"agree": 0, "disagree": 0, "undetermined": 0, "undeclared": 0,
                 "disagreements": []}
    for (op, dtype), m in sorted(measured.items()):
        d = declared.get((op, dtype))
        if d is None:
            agreement["undeclared"] += 1
            continue
        status, dstatus = m["status"], d["status"]
        base = {"op_id": op, "dtype": dtype, "measured": status, "declared": dstatus,
                "source": d["source"], "n_cases": m["n_cases"]}
        if dstatus in DECLARED_FAILING and status == "pass":
            findings.append(dict(base, kind="stale_xfail", explanation=(
                f"declared {dstatus} by {d['source']}, yet all {m['n_cases']} cases pass: "
                f"the expectation looks stale")))
        elif dstatus == "pass" and status in FAILING:
            why = _why(reasons.get((op, dtype)))
            findings.append(dict(base, kind="undeclared_failure", explanation=(
                f"declared to work ({d['source']}), yet {status}" + (f": {why}" if why else ""))))
        aten = aten_names.get(op)
        if device == "mps" and status == "pass" and aten in kernels \
                and not kernels[aten][0] and kernels[aten][1]:
            used = [a for a in aten_ops.get((op, dtype), {}) if a != f"aten::{aten}"
                    and not a.startswith(f"aten::{aten}.")]
            kind = kernels[aten][1]
            findings.append(dict(base, kind="composite_passes", explanation=(
                f"aten::{aten} has no MPS kernel ({kind}), yet it passes natively"
                + (f" via {', '.join(used[:6])}" + ("…" if len(used) > 6 else "") if used else ""))))

        ms = _support(status, MEASURED_SUPPORTED, MEASURED_UNSUPPORTED)
        ds = _support(dstatus, DECLARED_SUPPORTED, ("unsupported",))
        if ms is None or ds is None:
            agreement["undetermined"] += 1
        elif ms == ds:
            agreement["agree"] += 1
        else:
            agreement["disagree"] += 1
            agreement["disagreements"].append(dict(base, explanation=(
                f"declared {'supported' if ds else 'unsupported'} ({d['source']}), "
                f"measured {status}")))
    decided = agreement["agree"] + agreement["disagree"]
    agreement["rate"] = agreement["agree"] / decided if decided else None
    counts = {kind: sum(f["kind"] == kind for f in findings) for kind in KINDS}
    return {
        "run": {k: run[k] for k in ("id", "device", "device_name", "torch_version", "state")},
        "declared": {"device": device, "torch_version": version, "pairs": len(declared)},
        "counts": counts, "findings": findings, "agreement": agreement,
    }
