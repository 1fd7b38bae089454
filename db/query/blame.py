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

- a case refused while its inputs moved to the target (MPS refuses float64
  tensors), by a message naming the case's own dtype, condemns every op its
  CPU reference dispatched, in that dtype: the dtype is refused, whatever the op.

- an op counts under the dtypes it ran in (a float32 irfft2 case runs
  `_fft_c2r` on complex64), as a model's calls are filed; a failure blamed on
  it stays under the case's dtype, and goes under the op's own dtype as well
  only when the case ran it in that one dtype alone; in its other dtypes such a
  failure leaves it unknown (which call failed is not known), never working.

The aten ops recorded for a case are what its CPU reference dispatched, and a
model's ops are captured on the CPU too, so both sides use the same names
(`aten::add.Tensor`, `aten::_fft_r2c`), and the same kernel variants
(mpsprobe.engine.aten.variant: rank and kernel-choosing arguments).
"""
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from mpsprobe.vocabulary import (BROKEN, CRASH_NOT_REPRODUCED, EAGER_PASSES, FAILED, FALLBACK, MISMATCH, OK,
                                 PASS, PASS_COLUMN, RAN, RANK, REASON_KIND, REFUSED_AT_TRANSFER, SKIP, UNCHECKED,
                                 UNKNOWN, UNSUPPORTED)
from . import rows as _rows

# Reason kinds of a pass that needed a derived allowance (mpsprobe.vocabulary.REASON_KINDS).
ALLOWANCES = (REASON_KIND["reduced_precision"].name, REASON_KIND["summation_order"].name)
# The compiled pass's own failures, and how an answer says its fallback.
COMPILED_FALLBACK, COMPILE_FAILED = REASON_KIND["compiled_fallback"], REASON_KIND["compile_failed"]
LEFT_TO_EAGER = "left to eager by the compiler"


@dataclass
class Evidence:
    """What one run says about one (aten op, dtype), or one kernel variant of it."""
    good: int = 0                                   # cases where it ran natively and correctly
    good_via: set = field(default_factory=set)      # probe op ids of those cases
    unchecked: int = 0                              # ran natively, values not comparable
    blamed: Counter = field(default_factory=Counter)      # status -> cases naming it
    inferred: Counter = field(default_factory=Counter)    # status -> cases pinned on it
    suspect: Counter = field(default_factory=Counter)     # status -> cases it may have failed
    input_specific: Counter = field(default_factory=Counter)
    at_transfer: int = 0                            # cases refused while moving their inputs
    via: set = field(default_factory=set)           # probe op ids that dispatched it
    messages: list = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)      # reason kind -> failing cases
    min_macos: set = field(default_factory=set)           # macOS versions the failures name
    timings: list = field(default_factory=list)     # (ref_ms, target_ms) of single-op cases
    allowed: Counter = field(default_factory=Counter)   # passes by a derived allowance: reason -> cases
    # status -> failing cases that ran the op in this dtype and others, failing on it in one
    unsure: Counter = field(default_factory=Counter)
    fell_back: set = field(default_factory=set)     # the ops its fallback cases named (fallback_ops)
    # cases that ran to their result after a worker died in them once, and not when run again
    crashed_once: int = 0

    @property
    def failures(self):
        return self.blamed + self.inferred

    def __add__(self, other):
        """The evidence of two variants together."""
        return Evidence(self.good + other.good, self.good_via | other.good_via,
                        self.unchecked + other.unchecked, self.blamed + other.blamed,
                        self.inferred + other.inferred, self.suspect + other.suspect,
                        self.input_specific + other.input_specific,
                        self.at_transfer + other.at_transfer, self.via | other.via,
                        self.messages + other.messages, self.kinds + other.kinds,
                        self.min_macos | other.min_macos, self.timings + other.timings,
                        self.allowed + other.allowed, self.unsure + other.unsure,
                        self.fell_back | other.fell_back, self.crashed_once + other.crashed_once)

    def failed(self, why):
        """Keep one failure's (message, reason kind, minimum macOS)."""
        message, kind, min_macos = why
        if message:
            self.messages.append(message)
        if kind:
            self.kinds[kind] += 1
        if min_macos:
            self.min_macos.add(min_macos)


def _json_list(text):
    return json.loads(text) if text else []


def _in_passes(passes):
    """An SQL condition on results' pass, and its arguments."""
    return f"results.{PASS_COLUMN} IN ({', '.join('?' for _ in passes)})", list(passes)


def evidence(conn, run_id, dtypes=None, by_variant=False, passes=EAGER_PASSES):
    """{(aten op, dtype): Evidence} for one run (optionally only some dtypes).

    `passes`: the passes whose cases count. By default the eager ones: a compiled
    case (the op through torch.compile) answers for the compiled form only, and its
    fallback is the compiler leaving an op to eager, not a CPU fallback; ask with
    passes=(COMPILED,) for the compiled answer.

    Each op is filed under the dtypes it ran in (results.aten_dtypes, filed as a
    model's calls are: a float32 irfft2 case runs `_fft_c2r` on complex64), or
    under the case's dtype where the case recorded none. A failure blamed on an op
    is filed under the case's dtype, and under the op's own dtype too when it ran
    in that one alone (failed_in).

    `by_variant`: {(aten op, dtype, variant): Evidence} instead, a case counting
    under each kernel variant of the op it ran (results.aten_variants; variant
    None where a case recorded none), so a failure of 5-D convolutions is kept
    apart from the 2-D ones. Only another probe op's passing case of the same
    variant then clears an op of a failure.
    """
    in_passes, pass_args = _in_passes(passes)
    rows = _rows(conn, f"""
        SELECT results.op_id, results.dtype, results.status, results.check_kind,
               results.aten_op, results.fallback_ops, results.aten_ops, results.aten_variants,
               results.aten_dtypes, results.reason, results.reason_kind, results.min_macos,
               results.message, results.notes, results.ref_ms, results.target_ms, ops.aten_name
        FROM results LEFT JOIN ops ON ops.id = results.op_id
        WHERE results.run_id = ? AND {in_passes}""", [run_id, *pass_args])
    found = defaultdict(Evidence)
    # (ops, cleared by, filed under, unsure under, status, op_id, why): failures no message pins on one op
    unplaced = []

    for r in rows:
        ops, fell_back, dtype, status = _json_list(r["aten_ops"]), _json_list(r["fallback_ops"]), r["dtype"], r["status"]
        variants = json.loads(r["aten_variants"]) if r["aten_variants"] else {}
        ran_in = json.loads(r["aten_dtypes"]) if r["aten_dtypes"] else {}

        def own(op):
            """The dtypes `op` ran in: passes and where it was probed are filed there."""
            return ran_in.get(op) or [dtype]

        def failed_in(op):
            """Where a failure blamed on `op` is filed: the case's dtype, and the op's own
            when it ran in that one alone (a float32 irfft2 failing on `_fft_c2r`)."""
            mine = own(op)
            return [dtype] + [d for d in mine if d != dtype] if len(mine) == 1 else [dtype]

        def unsure_in(op):
            """The op's other dtypes, where a failure blamed on it may have been."""
            return [d for d in own(op) if d not in failed_in(op)]

        def unsure(op, status):
            for k in keys(op, unsure_in(op)):
                found[k].unsure[status] += 1
                found[k].via.add(r["op_id"])

        def keys(op, in_dtypes):
            if not by_variant:
                return [(op, d) for d in in_dtypes]
            return [(op, d, v) for d in in_dtypes for v in variants.get(op) or [None]]

        def each(op_list, where=own):
            return [(op, k) for op in op_list for k in keys(op, where(op))]
        why = (r["message"] or r["reason"], r["reason_kind"], r["min_macos"])
        at_transfer = status in FAILED and ops and _refuses_its_dtype(r)
        for op, k in each(ops, (lambda op: [dtype]) if at_transfer else own):
            found[k].via.add(r["op_id"])
        if _crashed_once(r["notes"]):
            for op, k in each(ops):
                found[k].crashed_once += 1
        for op, k in each(fell_back, failed_in):
            found[k].blamed[FALLBACK] += 1
            found[k].fell_back.update(fell_back)
            found[k].via.add(r["op_id"])
            found[k].failed((None, r["reason_kind"], r["min_macos"]))
        for op in fell_back:
            unsure(op, FALLBACK)
        if status == PASS or (status == SKIP and r["check_kind"] == "shape"):
            kind = "good" if status == PASS else "unchecked"
            for op, k in each(ops):
                setattr(found[k], kind, getattr(found[k], kind) + 1)
                if status == PASS:
                    found[k].good_via.add(r["op_id"])
            if status == PASS and r["reason_kind"] in ALLOWANCES and r["reason"]:
                # "matches the CPU within TF32's error": said beside the pass, per op
                for op, k in each(ops):
                    found[k].allowed[r["reason"].replace("matches the CPU ", "")] += 1
            if status == PASS and len(ops) == 1 and r["target_ms"] is not None:
                for k in keys(ops[0], own(ops[0])):
                    found[k].timings.append((r["ref_ms"], r["target_ms"]))
        elif status == FALLBACK:
            others = [op for op in ops if op not in fell_back]
            if set(fell_back) <= set(ops):
                for op, k in each(others):
                    found[k].good += 1
                    found[k].good_via.add(r["op_id"])
            else:  # the target decomposed one of `others` into what fell back
                unplaced.append((others, {op: [keys(op, [d]) for d in own(op)] for op in others},
                                 {op: keys(op, failed_in(op)) for op in others},
                                 {op: keys(op, unsure_in(op)) for op in others}, FALLBACK, r["op_id"],
                                 (None, r["reason_kind"], r["min_macos"])))
        elif at_transfer:
            # Refused while its inputs moved: the dtype itself is refused, so every op the
            # CPU dispatched for it is (under the names the CPU, and a model, dispatch).
            for op, k in each(ops, lambda op: [dtype]):
                found[k].blamed[status] += 1
                found[k].at_transfer += 1
                found[k].failed(why)
        elif status in FAILED:
            named = r["aten_op"]
            if named:
                for k in keys(named, failed_in(named)):
                    found[k].blamed[status] += 1
                    found[k].via.add(r["op_id"])
                    found[k].failed(why)
                unsure(named, status)
            if not named or named not in ops:
                if not ops and r["aten_name"]:
                    # A crash or hang records no ops; the OpInfo's own aten op is the suspect.
                    ops = [f"aten::{r['aten_name']}"]
                    for k in keys(ops[0], [dtype]):
                        found[k].via.add(r["op_id"])
                unplaced.append((ops, {op: [keys(op, [d]) for d in own(op)] for op in ops},
                                 {op: keys(op, failed_in(op)) for op in ops},
                                 {op: keys(op, unsure_in(op)) for op in ops}, status, r["op_id"], why))

    for ops, cleared_by, filed_under, unsure_under, status, op_id, why in unplaced:
        # Only another probe op's passing case clears an op, in every dtype it ran in:
        # the same op passing with other inputs does not (the failure may be in those
        # inputs' path).
        open_ops = [op for op in ops if not all(any(found[k].good_via - {op_id} for k in in_dtype)
                                                for in_dtype in cleared_by[op])]
        for op in ops:
            for k in filed_under[op]:
                found[k].via.add(op_id)
                if len(open_ops) == 1 and op in open_ops:
                    found[k].inferred[status] += 1
                    found[k].failed(why)
                elif op in open_ops:
                    found[k].suspect[status] += 1
                elif not open_ops:
                    found[k].input_specific[status] += 1
            if len(open_ops) == 1 and op in open_ops:
                for k in unsure_under[op]:
                    found[k].via.add(op_id)
                    found[k].unsure[status] += 1
    found = dict(found)
    if dtypes:
        found = {k: ev for k, ev in found.items() if k[1] in dtypes}
    return found


def _refuses_its_dtype(row):
    """A case refused while its inputs moved, by a message naming the case's own dtype:
    the dtype is refused, not this op (a float32 case refused for a float64 side
    input says nothing of float32)."""
    if not (row["reason"] or "").startswith(REFUSED_AT_TRANSFER):
        return False
    return json.loads(row["notes"] or "{}").get("named_dtype") == row["dtype"]


def refused_dtypes(conn, run_id, passes=EAGER_PASSES):
    """{dtype: (cases, message)}: dtypes the run's target refuses outright, every case of
    the dtype refused while its inputs moved, naming that dtype, and none running
    (MPS and float64), among the cases of `passes`."""
    found = {}
    ran = ", ".join(f"'{s}'" for s in RAN)
    in_passes, pass_args = _in_passes(passes)
    for r in _rows(conn, f"""
            SELECT dtype, count(*) AS n, max(message) AS message,
                   sum(CASE WHEN status IN ({ran}) THEN 1 ELSE 0 END) AS ran,
                   sum(CASE WHEN reason LIKE ? AND json_extract(notes, '$.named_dtype') = dtype
                       THEN 1 ELSE 0 END) AS refused
            FROM results WHERE run_id = ? AND {in_passes} GROUP BY dtype""",
                   [REFUSED_AT_TRANSFER + "%", run_id, *pass_args]):
        if r["refused"] and not r["ran"]:
            found[r["dtype"]] = (r["refused"], r["message"])
    return found


def _crashed_once(notes):
    """Whether a case's notes say a worker died in it once and not when it ran again (the pool's
    crash rule): its result is the second run's, which the answer must say it rests on. The key
    as JSON writes it, as the grid's SQL looks for it: a string value holding the word has its
    quotes escaped, and notes a damaged database garbled raise nothing here."""
    return bool(notes) and json.dumps(CRASH_NOT_REPRODUCED) in notes


def verdict(ev):
    """(class, status, note) for one op's Evidence; ev None means never probed.

    class: ok | unchecked | fallback | mismatch | unsupported | unknown
    """
    klass, status, note = _verdict(ev)
    if ev is not None and ev.crashed_once:
        note += (f"; {ev.crashed_once} of its case(s) killed a worker once and ran to their result "
                 "in another, where the death did not recur")
    return klass, status, note


def _verdict(ev):
    if ev is None or not ev.via:
        return UNKNOWN, None, "never probed"
    if not (ev.good or ev.unchecked or ev.failures or ev.suspect or ev.input_specific):
        return UNKNOWN, None, "only in probe cases that failed on another op"
    failures = ev.failures
    broken = [s for s in BROKEN if failures[s]]
    passes = f"; passes in {ev.good} other case(s): depends on the arguments" if ev.good else ""
    how = "" if ev.blamed else " (the only op of a failing case not seen working elsewhere)"
    if ev.at_transfer and ev.at_transfer == sum(failures.values()):
        how = f" ({ev.at_transfer} case(s) refused while moving their inputs to the target)"
    if broken:
        status = max(broken, key=RANK.get)
        said = f"{status}: {COMPILE_FAILED.label}" if ev.kinds[COMPILE_FAILED.name] else status
        return UNSUPPORTED, status, f"{said}{how}{passes}"
    if failures[FALLBACK]:
        # Under torch.compile a fallback is an op left to eager on the target, never the CPU.
        where = LEFT_TO_EAGER if ev.kinds[COMPILED_FALLBACK.name] else "falls back to the CPU"
        return FALLBACK, FALLBACK, f"{where}{how}{passes}"
    if failures[MISMATCH]:
        return MISMATCH, MISMATCH, f"wrong numbers{how}{passes}"
    if ev.unsure:
        cases = ", ".join(f"{n} {s}" for s, n in ev.unsure.items())
        return UNKNOWN, None, (f"a case that ran it in this dtype and others failed on it ({cases}); "
                               "which dtype failed is not known" +
                               (f"; passes in {ev.good} other case(s)" if ev.good else ""))
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
