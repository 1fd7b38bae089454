"""Blame: answering per aten op and dtype from a probe run, does it work on the target?

A probe case dispatches several aten ops and passes or fails as a whole, so a
failing case must not condemn every op it touched. The rules:

- an op works (native and correct) when some passing case dispatched it; a
  case that fell back vouches for its other ops too, provided every op that
  fell back is one the case dispatched (else the blame is not placed);
- an op is unsupported / falls back when a failure message names it
  (results.aten_op, results.fallback_ops);
- a failing case that names nobody is pinned on its one op that no passing
  case of another probe op vouches for; with several such ops each is only a
  suspect (still unknown); with none, the failure depends on the inputs and
  is kept as a caveat on ops that otherwise work;
- an op that no case dispatched is unknown: never reported as working.

The aten ops recorded for a case are what its CPU reference dispatched, and a
model's ops are captured on the CPU too, so both sides use the same names.
"""
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from mpsprobe.vocabulary import (BROKEN, FAILED, FALLBACK, MISMATCH, OK, PASS, RANK, REASON_KIND, SKIP,
                                 UNCHECKED, UNKNOWN, UNSUPPORTED)
from . import rows as _rows

# Reason kinds of a pass that needed a derived allowance (mpsprobe.vocabulary.REASON_KINDS).
ALLOWANCES = (REASON_KIND["reduced_precision"].name, REASON_KIND["summation_order"].name)


@dataclass
class Evidence:
    """What one run says about one (aten op, dtype)."""
    good: int = 0                                   # cases where it ran natively and correctly
    good_via: set = field(default_factory=set)      # probe op ids of those cases
    unchecked: int = 0                              # ran natively, values not comparable
    blamed: Counter = field(default_factory=Counter)      # status -> cases naming it
    inferred: Counter = field(default_factory=Counter)    # status -> cases pinned on it
    suspect: Counter = field(default_factory=Counter)     # status -> cases it may have failed
    input_specific: Counter = field(default_factory=Counter)
    via: set = field(default_factory=set)           # probe op ids that dispatched it
    messages: list = field(default_factory=list)
    timings: list = field(default_factory=list)     # (ref_ms, target_ms) of single-op cases
    allowed: Counter = field(default_factory=Counter)   # passes by a derived allowance: reason -> cases

    @property
    def failures(self):
        return self.blamed + self.inferred


def _json_list(text):
    return json.loads(text) if text else []


def evidence(conn, run_id, dtypes=None):
    """{(aten op, dtype): Evidence} for one run (optionally only some dtypes)."""
    where, params = "results.run_id = ?", [run_id]
    if dtypes:
        where += f" AND results.dtype IN ({', '.join('?' for _ in dtypes)})"
        params += list(dtypes)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
    kind = "results.reason_kind" if "reason_kind" in columns else "NULL"
    rows = _rows(conn, f"""
        SELECT results.op_id, results.dtype, results.status, results.check_kind, {kind} AS reason_kind,
               results.aten_op, results.fallback_ops, results.aten_ops, results.reason,
               results.message, results.ref_ms, results.target_ms, ops.aten_name
        FROM results LEFT JOIN ops ON ops.id = results.op_id WHERE {where}""", params)
    found = defaultdict(Evidence)
    unplaced = []   # (ops, dtype, status, op_id): failures no message pins on one op

    for r in rows:
        ops, fell_back, dtype, status = _json_list(r["aten_ops"]), _json_list(r["fallback_ops"]), r["dtype"], r["status"]
        for op in ops:
            found[op, dtype].via.add(r["op_id"])
        for op in fell_back:
            found[op, dtype].blamed[FALLBACK] += 1
            found[op, dtype].via.add(r["op_id"])
        if status == PASS or (status == SKIP and r["check_kind"] == "shape"):
            kind = "good" if status == PASS else "unchecked"
            for op in ops:
                setattr(found[op, dtype], kind, getattr(found[op, dtype], kind) + 1)
                if status == PASS:
                    found[op, dtype].good_via.add(r["op_id"])
            if status == PASS and r["reason_kind"] in ALLOWANCES and r["reason"]:
                # "matches the CPU within TF32's error": said beside the pass, per op
                for op in ops:
                    found[op, dtype].allowed[r["reason"].replace("matches the CPU ", "")] += 1
            if status == PASS and len(ops) == 1 and r["target_ms"] is not None:
                found[ops[0], dtype].timings.append((r["ref_ms"], r["target_ms"]))
        elif status == FALLBACK:
            others = [op for op in ops if op not in fell_back]
            if set(fell_back) <= set(ops):
                for op in others:
                    found[op, dtype].good += 1
                    found[op, dtype].good_via.add(r["op_id"])
            else:  # the target decomposed one of `others` into what fell back
                unplaced.append((others, dtype, FALLBACK, r["op_id"]))
        elif status in FAILED:
            named = r["aten_op"]
            if named:
                found[named, dtype].blamed[status] += 1
                found[named, dtype].via.add(r["op_id"])
                found[named, dtype].messages.append(r["message"] or r["reason"])
            if not named or named not in ops:
                if not ops and r["aten_name"]:
                    # A crash or hang records no ops; the OpInfo's own aten op is the suspect.
                    ops = [f"aten::{r['aten_name']}"]
                    found[ops[0], dtype].via.add(r["op_id"])
                unplaced.append((ops, dtype, status, r["op_id"], r["message"] or r["reason"]))

    for ops, dtype, status, op_id, *message in unplaced:
        # Only another probe op's passing case clears an op: the same op passing
        # with other inputs does not (the failure may be in those inputs' path).
        open_ops = [op for op in ops if not (found[op, dtype].good_via - {op_id})]
        if len(open_ops) == 1:
            found[open_ops[0], dtype].inferred[status] += 1
            found[open_ops[0], dtype].messages.extend(m for m in message if m)
        elif open_ops:
            for op in open_ops:
                found[op, dtype].suspect[status] += 1
        else:
            for op in ops:
                found[op, dtype].input_specific[status] += 1
    return dict(found)


def verdict(ev):
    """(class, status, note) for one op's Evidence; ev None means never probed.

    class: ok | unchecked | fallback | mismatch | unsupported | unknown
    """
    if ev is None or not ev.via:
        return UNKNOWN, None, "never probed"
    if not (ev.good or ev.unchecked or ev.failures or ev.suspect or ev.input_specific):
        return UNKNOWN, None, "only in probe cases that failed on another op"
    failures = ev.failures
    broken = [s for s in BROKEN if failures[s]]
    passes = f"; passes in {ev.good} other case(s): depends on the arguments" if ev.good else ""
    how = "" if ev.blamed else " (the only op of a failing case not seen working elsewhere)"
    if broken:
        status = max(broken, key=RANK.get)
        return UNSUPPORTED, status, f"{status}{how}{passes}"
    if failures[FALLBACK]:
        return FALLBACK, FALLBACK, f"falls back to the CPU{how}{passes}"
    if failures[MISMATCH]:
        return MISMATCH, MISMATCH, f"wrong numbers{how}{passes}"
    caveat = ""
    if ev.input_specific:
        caveat = "; " + ", ".join(f"{n} {s}" for s, n in ev.input_specific.items()) + \
                 " case(s) with other inputs"
    if ev.good:
        allowed = "".join(f", {n} {reason}" for reason, n in sorted(ev.allowed.items()))
        return OK, PASS, f"passes in {ev.good} probe case(s){allowed}{caveat}"
    if ev.unchecked:
        return UNCHECKED, SKIP, f"runs natively; values not checkable (nondeterministic){caveat}"
    suspects = ", ".join(f"{n} {s}" for s, n in ev.suspect.items())
    return UNKNOWN, None, f"only seen in failing cases ({suspects}) among other unproven ops"


def timing(ev):
    """(CPU ms, target ms) medians over single-op passing cases, or None."""
    if ev is None or not ev.timings:
        return None
    return (statistics.median(t[0] for t in ev.timings),
            statistics.median(t[1] for t in ev.timings))


def out_of_place(op):
    """`aten::add.Tensor` for `aten::add_.Tensor`, `aten::relu` for `aten::relu_`; None
    for an op that is not an in-place one (`aten::_softmax` is not: a leading _)."""
    name, dot, overload = op.partition(".")
    base = name.rsplit("::", 1)[-1]
    if not base.endswith("_") or base.endswith("__") or len(base) < 2:
        return None
    return name[:-1] + dot + overload


def other_dtypes(found, op, dtype):
    """The dtypes, other than `dtype`, in which `op` was probed."""
    return sorted(d for (o, d) in found if o == op and d != dtype)


def aten_names(conn, run_id):
    """Every aten op name one run's cases dispatched."""
    return {r[0] for r in conn.execute(
        "SELECT DISTINCT je.value FROM results, json_each(results.aten_ops) AS je "
        "WHERE results.run_id = ? AND results.aten_ops IS NOT NULL", [run_id])}
