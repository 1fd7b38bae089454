"""Declared vs measured: where a run disagrees with what PyTorch declares.

Three kinds of finding, each worth something upstream:

- `stale_xfail`: declared failing, yet every case passes: an expected failure
  that no longer holds (a pull request removing it);
- `undeclared_failure`: declared to work, yet it fails: a bug nobody listed
  (an issue);
- `composite_passes`: the op's aten function has no MPS kernel, yet it passes
  natively: it decomposes into ops that have one (worth knowing before
  writing a kernel).

Backward cases are compared with the gradient lists (common_mps.py's
`mps_ops_grad_modifier`: XFAILLIST_GRAD, …, as `declared_entries` rows with
modifier 'grad'): a gradient is declared failing where an ungated gradient
list names the (op, dtype), declared to work where none does and the forward
is declared to work; findings of the backward pass carry `pass`: backward.

And one figure: the agreement rate, the fraction of (op, dtype) pairs where
measured support (pass, mismatch, skip: supported; unsupported or a CPU
fallback: not) agrees with the declared support. Errors, crashes and timeouts
decide nothing and are counted apart. For a CUDA run against OpInfo's CUDA
dtypes this checks the probe itself against PyTorch's own table.

Like is compared with like: an MPS run (or a test backend standing in for
one) with the MPS declarations, a CUDA run with the CUDA ones. A CPU run is
no evidence about either device, so it is never compared (FindingsError says
why, and the site's page lists nothing). The MPS declarations come from the
database when `mpsprobe declared` recorded that release there, else from the
bundled knowledge base (mpsprobe.db.query.knowledge).

`mpsprobe findings` and the site's /-/findings page both call `report`.
"""
import json
from collections import defaultdict
from dataclasses import dataclass

from mpsprobe.errors import MpsprobeError
from mpsprobe.vocabulary import (BACKWARD, ERROR, FAILING, FALLBACK, FORWARD, MISMATCH, PASS,
                                 PASS_COLUMN, SKIP, UNSUPPORTED)
from . import declared, knowledge, present, rows, view
from .runs import pick_run


@dataclass(frozen=True)
class Kind:
    name: str
    title: str       # a heading
    summary: str     # what the report says of one
    why: str         # what it is worth


KINDS = (
    Kind("stale_xfail", "Declared failing, yet passes", "declared failing but passes",
         "An expected failure that no longer holds: worth a pull request upstream."),
    Kind("undeclared_failure", "Declared fine, yet fails", "declared fine but fails",
         "A failure PyTorch does not list: worth an issue upstream."),
    Kind("composite_passes", "No MPS kernel, yet passes natively",
         "no MPS kernel, yet passes natively",
         "The aten function is composite and decomposes into ops MPS has kernels for."),
)

MEASURED_SUPPORTED = (PASS, MISMATCH, SKIP)
MEASURED_UNSUPPORTED = (UNSUPPORTED, FALLBACK)
DECLARED_SUPPORTED = (PASS, MISMATCH)
DECLARED_UNSUPPORTED = (UNSUPPORTED,)
DECLARED_FAILING = (UNSUPPORTED, MISMATCH, ERROR)


class FindingsError(MpsprobeError):
    """No run, or no declaration to compare it with: one line for the user; `web`,
    the same said for the site's page (no command-line flags)."""

    def __init__(self, message, web=None):
        super().__init__(message)
        self.web = web or message


def _support(status, supported, unsupported):
    if status in supported:
        return True
    if status in unsupported:
        return False
    return None


def _measured(conn, run_id, pass_=FORWARD):
    pairs = {(r["op_id"], r["dtype"]): r for r in rows(
        conn, f"SELECT op_id, dtype, status, n_cases, n_{PASS} FROM {view(conn, 'op_dtype_status')} "
              f"WHERE run_id = ? AND {PASS_COLUMN} = ?", [run_id, pass_])}
    aten_ops = defaultdict(dict)
    reasons = {}
    for r in rows(conn, "SELECT op_id, dtype, status, reason, aten_op, message, aten_ops "
                        f"FROM results WHERE run_id = ? AND {PASS_COLUMN} = ? ORDER BY case_id",
                  [run_id, pass_]):
        key = (r["op_id"], r["dtype"])
        for name in json.loads(r["aten_ops"] or "[]"):
            aten_ops[key][name] = None
        if r["status"] == pairs[key]["status"] and key not in reasons:
            reasons[key] = r
    return pairs, aten_ops, reasons


def _kernels(conn, version):
    """{base aten name: (has MPS kernel, composite kinds)} for one torch version.

    A function without an MPS kernel that is not composite cannot run natively
    on MPS at all, so only composite ones can be `composite_passes`.
    """
    if not version:
        return {}
    return {r["name"]: (bool(r["has_mps"]), r["composite"]) for r in rows(
        conn, "SELECT name, max(has_mps) AS has_mps, group_concat(DISTINCT composite) "
              "AS composite FROM declared_kernels WHERE torch_version = ? GROUP BY name",
        [version])}


def _why(reason_row):
    if not reason_row:
        return ""
    parts = [reason_row.get("reason") or ""]
    if reason_row.get("aten_op"):
        parts.append(reason_row["aten_op"])
    return " ".join(p for p in parts if p)


def _grad_lists(conn, version):
    """{(op, dtype or None): list name} of the ungated gradient lists of one torch version."""
    if "declared_entries" not in present(conn):
        return {}
    return _by_op_dtype(rows(conn, "SELECT list_name, op_id, dtypes FROM declared_entries "
                                   "WHERE torch_version = ? AND modifier = 'grad' AND gate IS NULL",
                             [version]))


def _by_op_dtype(entries):
    found = {}
    for r in entries:
        for dtype in json.loads(r["dtypes"]) if r["dtypes"] else [None]:
            found.setdefault((r["op_id"], dtype), r["list_name"])
    return found


class Declaration:
    """One release's declarations for a device: from the database, or the knowledge base."""

    def __init__(self, conn, device, run_version):
        self.device, self.origin = device, "database"
        self.version = declared.version_for(conn, device, run_version)
        if self.version is not None:
            self.rows = {(r["op_id"], r["dtype"]): r for r in rows(
                conn, "SELECT op_id, dtype, status, source, note FROM declared "
                      "WHERE torch_version = ? AND device = ?", [self.version, device])}
            self.kernels = _kernels(conn, declared.same_release(declared.kernel_versions(conn),
                                                                run_version))
            self.grad_lists = _grad_lists(conn, self.version) if device == "mps" else {}
            return
        kb = knowledge.load()
        self.version = declared.same_release(knowledge.releases(kb), run_version) \
            if device == "mps" else None
        if self.version is None:
            hint = "mpsprobe declared" + (" --opinfo-cuda" if device == "cuda" else "")
            raise FindingsError(
                f"no {device} declarations for torch {run_version} in the database: "
                f"record them with `{hint}`",
                web=f"No {device} declarations for torch {run_version} in this database "
                    f"(nor in mpsprobe's bundled knowledge base): nothing to compare with.")
        self.origin = "bundled knowledge base"
        self.rows = {(r["op_id"], r["dtype"]): r for r in knowledge.declared_rows(kb, self.version)}
        self.kernels = {}
        for group, names in kb["releases"][self.version]["kernels"].items():
            for aten_name in names:
                base = aten_name.split(".", 1)[0]
                has, kinds = self.kernels.get(base, (False, None))
                self.kernels[base] = (has or group == "mps",
                                      kinds or ("composite" if group == "composite" else None))
        names = ("modifier", "list_name", "list_key", "op_id", "dtypes", "gate")
        self.grad_lists = _by_op_dtype(
            e for e in (dict(zip(names, x)) for x in kb["releases"][self.version]["entries"])
            if e["modifier"] == "grad" and e["gate"] is None)


def _comparable(run, against):
    """The device whose declarations `run` is compared with; FindingsError when none is like it."""
    own = declared.declared_device(run["device"])
    device = against or own
    if own is not None and device == own:
        return device
    measured = f"run {run['id'][:12]} was measured on {run['device']}"
    if own is None and against is None:
        raise FindingsError(
            f"{measured}, for which PyTorch declares nothing: findings compare an MPS or CUDA "
            "run with that device's declarations (--run picks one)",
            web=f"Run {run['id'][:12]} was measured on {run['device']}, for which PyTorch declares "
                "nothing: findings compare an MPS or CUDA run with that device's declarations. "
                "Choose such a run above.")
    raise FindingsError(
        f"{measured}: it is no evidence about {device.upper()}, so it is not compared with "
        f"{device.upper()}'s declarations (--run picks a{'n' if device == 'mps' else ''} "
        f"{device.upper()} run)",
        web=f"Run {run['id'][:12]} was measured on {run['device']}: it is no evidence about "
            f"{device.upper()}, so nothing is listed against {device.upper()}'s declarations. "
            f"Choose a{'n' if device == 'mps' else ''} {device.upper()} run above.")


def _backward_findings(conn, run_id, lists, forward_declared):
    """Findings of the backward pass against the gradient lists (mps only)."""
    measured, _, reasons = _measured(conn, run_id, BACKWARD)
    findings = []
    for (op, dtype), m in sorted(measured.items()):
        listed = lists.get((op, dtype)) or lists.get((op, None))
        status = m["status"]
        base = {"op_id": op, "dtype": dtype, PASS_COLUMN: BACKWARD, "measured": status,
                "n_cases": m["n_cases"]}
        if listed and "SKIP" not in listed and status == PASS:
            findings.append(dict(base, kind="stale_xfail", declared=ERROR, source=listed, explanation=(
                f"gradient declared failing by {listed}, yet all {m['n_cases']} backward cases pass: "
                "the expectation looks stale")))
        elif not listed and status in FAILING and status != SKIP \
                and (forward_declared.get((op, dtype)) or {}).get("status") == PASS:
            why = _why(reasons.get((op, dtype)))
            findings.append(dict(base, kind="undeclared_failure", declared=PASS, source="common_mps", explanation=(
                f"gradient declared to work (no gradient list names it), yet {status}"
                + (f": {why}" if why else ""))))
    return findings


def report(conn, run_id=None, against=None):
    """The findings and agreement rate of one run (default: the run picker's) as a dict."""
    run = pick_run(conn, run_id=run_id)
    device = _comparable(run, against)
    declaration = Declaration(conn, device, run["torch_version"])
    version, declared_rows, kernels = declaration.version, declaration.rows, declaration.kernels
    measured, aten_ops, reasons = _measured(conn, run["id"])
    aten_names = {r["id"]: r["aten_name"] for r in rows(conn, "SELECT id, aten_name FROM ops")}

    findings = []
    agreement = {"agree": 0, "disagree": 0, "undetermined": 0, "undeclared": 0,
                 "disagreements": []}
    for (op, dtype), m in sorted(measured.items()):
        d = declared_rows.get((op, dtype))
        if d is None:
            agreement["undeclared"] += 1
            continue
        status, dstatus = m["status"], d["status"]
        base = {"op_id": op, "dtype": dtype, PASS_COLUMN: FORWARD, "measured": status, "declared": dstatus,
                "source": d["source"], "n_cases": m["n_cases"]}
        if dstatus in DECLARED_FAILING and status == PASS:
            findings.append(dict(base, kind="stale_xfail", explanation=(
                f"declared {dstatus} by {d['source']}, yet all {m['n_cases']} cases pass: "
                f"the expectation looks stale")))
        elif dstatus == PASS and status in FAILING:
            why = _why(reasons.get((op, dtype)))
            findings.append(dict(base, kind="undeclared_failure", explanation=(
                f"declared to work ({d['source']}), yet {status}" + (f": {why}" if why else ""))))
        aten = aten_names.get(op)
        if device == "mps" and status == PASS and aten in kernels \
                and not kernels[aten][0] and kernels[aten][1]:
            used = [a for a in aten_ops.get((op, dtype), {}) if a != f"aten::{aten}"
                    and not a.startswith(f"aten::{aten}.")]
            kind = kernels[aten][1]
            findings.append(dict(base, kind="composite_passes", explanation=(
                f"aten::{aten} has no MPS kernel ({kind}), yet it passes natively"
                + (f" via {', '.join(used[:6])}" + ("…" if len(used) > 6 else "") if used else ""))))

        ms = _support(status, MEASURED_SUPPORTED, MEASURED_UNSUPPORTED)
        ds = _support(dstatus, DECLARED_SUPPORTED, DECLARED_UNSUPPORTED)
        if ms is None or ds is None:
            agreement["undetermined"] += 1
        elif ms == ds:
            agreement["agree"] += 1
        else:
            agreement["disagree"] += 1
            agreement["disagreements"].append(dict(base, explanation=(
                f"declared {'supported' if ds else UNSUPPORTED} ({d['source']}), "
                f"measured {status}")))
    if device == "mps":
        findings += _backward_findings(conn, run["id"], declaration.grad_lists, declared_rows)
    decided = agreement["agree"] + agreement["disagree"]
    agreement["rate"] = agreement["agree"] / decided if decided else None
    counts = {k.name: sum(f["kind"] == k.name for f in findings) for k in KINDS}
    return {
        "run": {k: run[k] for k in ("id", "device", "device_name", "torch_version", "state")},
        "declared": {"device": device, "torch_version": version, "pairs": len(declared_rows),
                     "from": declaration.origin},
        "counts": counts, "findings": findings, "agreement": agreement,
    }
