"""The answer to `mpsprobe check`: per aten op of a model, what the database says.

The answers come from the best evidence there is (mpsprobe.db.query.knowledge
ranks it): a probe run picked by mpsprobe.db.query.runs, what PyTorch declares
for MPS (.declared), or nothing; each answer names what it rests on. How a
failing case's blame is placed on one of the ops it dispatched is explained in
mpsprobe.db.query.blame, and which evidence answers the model's own use of an
op (its shapes and arguments) in .matching. The words and symbols are
mpsprobe.vocabulary's answers; this module formats the whole report, lines or JSON.
"""
import platform
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from mpsprobe import suggestions as advice
from mpsprobe.db.query import blame, knowledge
from mpsprobe.db.query.runs import (VIRTUAL_MACHINE, answers_mps, describe, evidence_rank,
                                   list_runs, machine_kind)
from mpsprobe.vocabulary import (ANSWER, ANSWERS, DECLARED, FAIL_ON, FALLBACK, MISMATCH,
                                 NO_ANSWER_EXIT, OK, OTHER_DTYPES, UNCHECKED, UNKNOWN, UNSUPPORTED)
from .capture import CheckError, ModelOps, OpUse, ops_from_json  # noqa: F401 (re-exported)
from .matching import Evidence

ORDER = {name: i for i, name in enumerate(ANSWERS)}


@dataclass
class OpAnswer:
    use: OpUse
    klass: str
    status: Optional[str]
    note: str
    via: list
    message: Optional[str] = None
    timing: Optional[tuple] = None       # (CPU ms, target ms) median of single-op cases
    confidence: Optional[str] = None     # how much a `?` should worry (vocabulary.CONFIDENCES)
    suggestions: list = field(default_factory=list)    # suggestions.Suggestion, for failing ops
    source: Optional[str] = None         # what the answer rests on (knowledge.RANKS, with its run or release)

    @property
    def aten_op(self):
        return self.use.aten_op

    @property
    def dtype(self):
        return self.use.dtype

    @property
    def answer(self):
        """ok, unchecked, declared, unknown, fallback, mismatch or unsupported (vocabulary.ANSWERS)."""
        return self.klass

    def to_json(self):
        a = self
        return {"aten_op": a.use.aten_op, "dtype": a.use.dtype, "class": a.klass,
                "status": a.status, "note": a.note, "confidence": a.confidence,
                "count": a.use.count, "places": a.use.places, "lines": a.use.lines,
                "variants": a.use.variants, "cpu_widened": a.use.widened, "on_mps": a.use.on_mps,
                "probe_ops": a.via, "message": a.message, "source": a.source,
                "suggestions": [{"text": x.text, "source": x.source} for x in a.suggestions],
                "cpu_ms": a.timing[0] if a.timing else None,
                "target_ms": a.timing[1] if a.timing else None}


@dataclass
class Report:
    model_ops: ModelOps
    run: Optional[dict]                # the run that answers; None when only declarations do
    answers: list
    model_ms: Optional[dict] = None    # model_speed(): the whole step, the replayed calls as its breakdown
    recorded_in: Optional[str] = None  # the database a replay was recorded in
    batch_sweep: Optional[dict] = None  # check --run --batch: modelcheck.batches.sweep_and_record()
    speed: Optional[dict] = None        # the newest batch sweep recorded for this model (speed_of)
    declared: Optional[object] = None   # the declared.Declared answering the run's gaps, or every op
    db_path: Optional[str] = None       # the database asked (None: none was there)
    db_missing: Optional[str] = None    # the default database's path, when it is not there
    beside: list = field(default_factory=list)   # the database's other-device runs (not MPS evidence)
    compiled: Optional[object] = None   # check --compiled: modelcheck.compiled.Compiled, what the exit answers

    @property
    def ops(self):
        """The per-op answers, most severe first."""
        return self.answers

    def counts(self):
        return Counter(a.klass for a in self.answers)

    def failing(self, fail_on):
        return [a for a in self.answers if a.klass in FAIL_ON[fail_on]]

    def exit_code(self, fail_on):
        """exit_status() of the answers; with a compiled answer, of its answers."""
        if self.compiled is not None:
            return self.compiled.exit_code(fail_on)
        return exit_status(self.answers, fail_on)

    def answered_from(self):
        """What the answers rest on, as a dict: the question's device, the evidence rank of the
        run (if any), the declared release and macOS (if any), and the database asked."""
        run, declared = self.run, self.declared
        return {"rank": evidence_rank(run) if run else knowledge.DECLARED,
                "run_id": run and run["id"],
                "declared_release": declared and declared.release,
                "declared_macos": declared and (declared.macos or f">= {declared.min_macos}"),
                "db": self.db_path}

    def to_json(self, fail_on=FALLBACK):
        run = self.run or {}
        return {
            "model": self.model_ops.model, "mode": self.model_ops.mode,
            "dtype": self.model_ops.dtype, "distinct_ops": self.model_ops.distinct,
            "op_dtype_pairs": len(self.answers),
            "run": {k: run.get(k) for k in ("id", "device", "device_name", "backend",
                                            "torch_version", "os_name", "os_version",
                                            "chip", "started", "state")},
            "answered_from": self.answered_from(),
            "counts": {name: self.counts().get(name, 0) for name in ANSWERS},
            "fallback_calls": sum(a.use.count for a in self.answers if a.klass == FALLBACK),
            "fail_on": fail_on, "exit_code": self.exit_code(fail_on),
            "kept_float64": list(self.model_ops.kept),
            "ops": [a.to_json() for a in self.answers],
            **({"model_ms": self.model_ms} if self.model_ms else {}),
            **({"batch_sweep": self.batch_sweep} if self.batch_sweep else {}),
            **({"speed": self.speed} if self.speed else {}),
            **({"compiled": self.compiled.to_json(fail_on)} if self.compiled is not None else {}),
        }


def exit_status(answers, fail_on):
    """1: an op at or above `fail_on`; 3: none, but an answer rests on no evidence; 0: every
    op known to work at that level (or `fail_on` never)."""
    if any(a.klass in FAIL_ON[fail_on] for a in answers):
        return 1
    if fail_on != "never" and any(a.klass == UNKNOWN for a in answers):
        return NO_ANSWER_EXIT
    return 0


def exit_line(answers, fail_on, code, evidence="evidence", when=""):
    """The report's last line: its exit status and why (`when`: " when compiled")."""
    failing = sum(a.klass in FAIL_ON[fail_on] for a in answers)
    unknown = sum(a.klass == UNKNOWN for a in answers)
    if code == 1:
        return f"exit 1: {failing} (op, dtype) pair(s) at or above --fail-on {fail_on}{when}"
    if code == NO_ANSWER_EXIT:
        return (f"exit {code}: nothing at or above --fail-on {fail_on}{when}, but {unknown} (op, dtype) "
                f"pair(s) rest on no {evidence}: not a yes")
    return f"exit 0: nothing at or above --fail-on {fail_on}{when}"


WHOLE_STEP, SUM_OF_CALLS = "whole step", "sum of calls"


def model_speed(whole, calls):
    """The model's speed for the report, or None: `whole`, modelcheck.batches.step_time's row
    (or None), decides where both sides were timed; otherwise the replay's sum of calls
    (`calls`: replay.model_time's (CPU ms, target ms, calls timed), or None), which
    synchronises after every call and so overstates the target's time.

    {"method": WHOLE_STEP or SUM_OF_CALLS, "cpu", "target" (ms), "reps", "warmup",
    "cpu_threads", "note" (why the whole step was not timed), "calls": {"cpu", "target",
    "calls_timed"} (the breakdown)}."""
    breakdown = {"cpu": calls[0], "target": calls[1], "calls_timed": calls[2]} if calls else None
    whole = whole or {}
    if whole.get("cpu_ms") and whole.get("target_ms"):
        return {"method": WHOLE_STEP, "cpu": whole["cpu_ms"], "target": whole["target_ms"],
                "reps": whole.get("reps"), "warmup": whole.get("warmup"),
                "cpu_threads": whole.get("cpu_threads"), "note": None, "calls": breakdown}
    if breakdown is None:
        return None
    return {"method": SUM_OF_CALLS, "cpu": breakdown["cpu"], "target": breakdown["target"],
            "note": whole.get("note") or "not timed", "calls": breakdown}


def _speed_lines(speed, mode, device):
    """The report's speed lines: the figure, with how it was measured, then the breakdown."""
    calls = speed.get("calls")
    per_call = (f"{calls['calls_timed']} distinct calls replayed one by one, each synchronised, sum to "
                f"{calls['target']:.3g} ms on {device} vs {calls['cpu']:.3g} ms on the CPU") if calls else None
    if speed["method"] == WHOLE_STEP:
        lines = [f"  measured: one {mode} step ≈ {speed['target']:.3g} ms on {device} vs {speed['cpu']:.3g} ms "
                 f"on the CPU ({speed['cpu_threads']} threads): the whole step timed, synchronised, "
                 f"median of {speed['reps']} after {speed['warmup']} warm-up"]
        return lines + ([f"    per call (breakdown): {per_call}"] if per_call else [])
    return [f"  measured: one {mode} ≈ {speed['target']:.3g} ms of kernels on {device} vs "
            f"{speed['cpu']:.3g} ms on the CPU, from the calls alone: {per_call} (the whole step was not "
            f"timed: {speed['note']})"]


def this_macos():
    """The macOS version of the Mac asking ("13.6"), None on any other system."""
    return (platform.mac_ver()[0] or None) if sys.platform == "darwin" else None


def answer(conn, model_ops, run, model_ms=None, recorded_in=None, declared=None, db_path=None):
    """The Report for `model_ops` against one run (a runs-table row), its gaps answered
    by `declared` (a declared.Declared); with no run, against `declared` alone."""
    have_macos = this_macos()
    if run is not None:
        evidence = Evidence(conn, run["id"], fallback=declared)
        source = f"{_rank(run)}, run {run['id'][:12]}"
        measured_macos = run.get("os_version") if run.get("os_name") == "macOS" else None
    else:
        evidence, source, measured_macos = declared, declared.describe(), None
    answers = []
    for use in model_ops.ops:
        m = evidence.match(use)
        ev = m.ev
        message = ev.messages[0] if ev and ev.messages else None
        said = m.source or source
        if said.startswith(knowledge.DECLARED):
            said = declared.describe()
        tips = []
        if m.klass in (UNSUPPORTED, MISMATCH, FALLBACK):
            kinds = [k for k, _ in ev.kinds.most_common()] if ev else []
            min_macos = max(ev.min_macos, key=_version, default=None) if ev else None
            tips = advice.for_answer(use.aten_op, m.status, kinds, use.dtype, message, min_macos,
                                     have_macos, None if m.source else measured_macos)
        if m.source:      # a declaration's text is what PyTorch would say, not what anything said
            message = None
        answers.append(OpAnswer(use, m.klass, m.status, m.note, sorted(ev.via) if ev else [],
                                message, blame.timing(ev), m.confidence, tips, said))
    answers.sort(key=lambda a: (ORDER[a.klass], a.use.aten_op, a.use.dtype or ""))
    beside = [] if run is not None or conn is None else \
        [describe(r) for r in list_runs(conn, with_results_only=True) if not answers_mps(r)]
    return Report(model_ops, run, answers, model_ms, recorded_in,
                  speed=speed_of(conn, model_ops) if conn is not None else None,
                  declared=declared, db_path=db_path, beside=beside)


def _rank(run):
    rank = evidence_rank(run)
    return f"measured on {run['device']}, not MPS" if rank == knowledge.OTHER_DEVICE else rank


def _basis_lines(report):
    """The report's first lines after the title: what the answers rest on."""
    run, declared, db = report.run, report.declared, report.db_path
    in_db = f"in {db}" if db else f"(no database: {report.db_missing or 'none'} does not exist)"
    if run is None:
        lines = [f"MPS: {declared.describe()}; no measured MPS run {in_db}"]
        if report.beside:
            lines.append(f"  beside it, not MPS evidence: {len(report.beside)} other run(s) "
                         f"({'; '.join(report.beside[:2])}{'; …' if len(report.beside) > 2 else ''}): "
                         "--device or --run-id shows one's answers")
        return lines
    target = f"{run['device']} ({run.get('device_name') or '?'})"
    where = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    if run.get("os_name") == "macOS":   # a virtual machine's GPU is not a Mac's: say which answers
        where += f" ({machine_kind(run)}{', ' + run['chip'] if run.get('chip') else ''})"
    rank = _rank(run)
    lines = [(f"MPS: {rank}: " if rank in (knowledge.MEASURED, knowledge.MEASURED_VM) else "") +
             f"answers from run {run['id'][:12]}: {target}, torch {run['torch_version']}, "
             f"{where}, {(run.get('started') or '')[:10]}"]
    if run.get("backend"):
        lines.append("  (a test backend: NOT a real device measurement)")
    elif rank not in knowledge.RANKS:
        lines.append(f"  ({rank}: asked for with --device or --run-id)")
    gaps = sum((a.source or "").startswith(knowledge.DECLARED) for a in report.answers)
    if declared and gaps:
        lines.append(f"  {gaps} answer(s) the run leaves open: {declared.describe()}")
    return lines


def speed_of(conn, model_ops):
    """The newest whole-model batch sweep (`check --run --batch`) of this model, mode and
    dtype in the database: {run_id, device, started, best batch and speedup, crossover}."""
    from mpsprobe.db.query import speed as speed_q
    mode = "training" if model_ops.mode == "forward+backward" else "inference"
    # A sweep whose target was the CPU itself measures no device.
    sweeps = [s for s in speed_q.model_sweeps(conn, model=model_ops.model)
              if s["mode"] == mode and s["dtype"] == model_ops.dtype
              and (s["device"] or "cpu").split(":")[0] != "cpu"]
    # Bare metal answers before a virtual machine, whose GPU is not a Mac's; newest first within each.
    sweeps.sort(key=lambda s: s["machine_kind"] == VIRTUAL_MACHINE)
    timed = [r for s in sweeps[:1] for r in s["rows"] if r.get("speedup")]
    if not timed:
        return None
    best = max(timed, key=lambda r: r["speedup"])
    s = sweeps[0]
    device = s["device"] + (f" ({VIRTUAL_MACHINE})" if s["machine_kind"] == VIRTUAL_MACHINE else "")
    return {"run_id": s["run_id"], "device": device, "started": s["started"],
            "batches": [r["batch"] for r in timed], "best_batch": best["batch"],
            "best_speedup": best["speedup"], "crossover_batch": s["crossover_batch"],
            "always": bool(s["always"])}


def _version(text):
    return tuple(int(x) for x in text.split(".") if x.isdigit())


def _names(answers, limit=3):
    """Each op name once (an op failing in two dtypes is one name here)."""
    names = list(dict.fromkeys(a.use.aten_op for a in answers))
    return ", ".join(names[:limit]) + (", …" if len(names) > limit else "")


def _listed(items, limit=3):
    return ", ".join(items[:limit]) + (", …" if len(items) > limit else "")


def _code_lines(lines, limit=3):
    """"model.py:20, 21" for ["model.py:20", "model.py:21"]: each file named once."""
    by_file = {}
    for text in lines[:limit]:
        path, _, number = text.rpartition(":")
        by_file.setdefault(path, []).append(number)
    shown = "; ".join(f"{path}:{', '.join(numbers)}" for path, numbers in by_file.items())
    return shown + (", …" if len(lines) > limit else "")


# Ops that only allocate (their values are never read before written): no porter acts on
# them while they work, so working ones share one line; a failing one keeps its row.
ALLOCATIONS = ("aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
               "aten::new_empty_strided", "aten::empty_permuted", "aten::resize_")


def _fold_allocations(answers):
    """(answers to show one per row, allocation-only answers folded into one line)."""
    folded = [a for a in answers if a.use.aten_op in ALLOCATIONS and a.klass in (OK, UNCHECKED, DECLARED)]
    return [a for a in answers if a not in folded], folded


def _allocation_line(folded):
    calls = _listed([f"{a.use.aten_op} {a.use.dtype} ×{a.use.count}" for a in folded], limit=6)
    symbols = "".join(sorted({ANSWER[a.klass].symbol for a in folded}))
    return f"{symbols} allocation only, working: {calls}"


def format_report(report, fail_on=FALLBACK):
    """The human-readable report, as a list of lines."""
    mo, run = report.model_ops, report.run
    lines = [f"{mo.model} {mo.mode}, {mo.dtype} — {mo.distinct} distinct aten ops, "
             f"answered per (op, dtype): {len(report.answers)}"] + _basis_lines(report)
    summary = []
    for name in ANSWERS:
        group = [a for a in report.answers if a.klass == name]
        if group:
            shown = f" ({_names(group)})" if name not in (OK, UNCHECKED, DECLARED) else ""
            summary.append(f"{ANSWER[name].symbol} {len(group)} {ANSWER[name].label}{shown}")
    lines.append("  " + "   ".join(summary))
    if mo.kept:
        lines.append(f"  kept in float64 (not cast by --dtype): {', '.join(mo.kept)}")
    if report.speed and not report.batch_sweep:
        sp = report.speed
        wins = ("at every batch measured" if sp["always"] else
                f"from batch {sp['crossover_batch']}" if sp["crossover_batch"] is not None else "at no batch measured")
        lines.append(f"  speed: {sp['device']} beats the CPU {wins} (best {sp['best_speedup']:.2f}x at batch "
                     f"{sp['best_batch']}; batch sweep of run {sp['run_id'][:12]}, {(sp['started'] or '')[:10]})")
    if report.model_ms:
        lines += _speed_lines(report.model_ms, mo.mode, run["device"])
    fallback_calls = sum(a.use.count for a in report.answers if a.klass == FALLBACK)
    if fallback_calls:
        lines.append(f"  expected cost: {fallback_calls} CPU fallback call(s) per "
                     f"{'step' if mo.mode == 'forward+backward' else 'forward'}, "
                     "each copying its tensors to the CPU and back")
    lines.append("")
    shown, folded = _fold_allocations(report.answers)
    width = max((len(a.use.aten_op) for a in shown), default=10)
    for a in shown:
        timing = ""
        if a.timing:
            cpu_ms, target_ms = a.timing
            timing = f"; target {target_ms:.3g} ms vs CPU {cpu_ms:.3g} ms"
        # How sure a `?` is, unless the note says it already ("never probed in float16 (probed in …)").
        sure = f" [{a.confidence}]" if a.klass == UNKNOWN and a.confidence not in (None, OTHER_DTYPES) \
            and a.confidence not in a.note else ""
        # An answer resting on other evidence than the header's says which.
        other = f" [{a.source}]" if (a.source or "").startswith(knowledge.DECLARED) and run is not None else ""
        lines.append(f"{ANSWER[a.klass].symbol} {a.use.aten_op:<{width}} {a.use.dtype or '-':<9} "
                     f"×{a.use.count:<4} {a.note}{sure}{timing}{other}")
        where = "   ".join(x for x in (_listed(a.use.places) and f"in {_listed(a.use.places)}",
                                       a.use.lines and f"at {_code_lines(a.use.lines)}") if x)
        if where:
            lines.append(f"    {where}")
        if a.use.on_mps:
            lines.append(f"    {a.use.on_mps}")
        if a.use.widened:
            lines.append(f"    the CPU has no {a.use.dtype} kernel for it: captured by running it in a wider dtype (float32, complex64)")
        if a.klass in (UNSUPPORTED, MISMATCH, FALLBACK) and a.message:
            lines.append(f"    {a.message[:160]}")
        lines += [f"    → {tip.text} ({tip.source})" for tip in a.suggestions]
    if folded:
        lines.append(_allocation_line(folded))
    lines.append("")
    if report.compiled is not None:   # the eager answers above stand beside; the exit is the compiled one's
        from .compiled import format_lines
        lines += ["eager answers above; with --compiled the exit status answers for the compiled form:", ""]
        lines += format_lines(report.compiled, fail_on, report.db_path)
    else:
        lines.append(exit_line(report.answers, fail_on, report.exit_code(fail_on)))
    if report.batch_sweep:
        from mpsprobe.modelcheck.batches import format_sweep
        lines += format_sweep(report.batch_sweep)
    if report.recorded_in:
        lines.append(f"recorded as run {run['id']} in {report.recorded_in}")
    return lines
