"""The answer to `mpsprobe check`: per aten op of a model, what the database says.

The answers come from one probe run, picked by mpsprobe.db.query.runs; how a
failing case's blame is placed on one of the ops it dispatched is explained in
mpsprobe.db.query.blame. The words and symbols are mpsprobe.vocabulary's
answers; this module formats the whole report, lines or JSON.
"""
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from mpsprobe.db.query import blame
from mpsprobe.vocabulary import (ANSWER, ANSWERS, FAIL_ON, FALLBACK, MISMATCH, OK, UNCHECKED,
                                 UNKNOWN, UNSUPPORTED)
from .capture import CheckError, ModelOps, OpUse, ops_from_json  # noqa: F401 (re-exported)

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

    @property
    def aten_op(self):
        return self.use.aten_op

    @property
    def dtype(self):
        return self.use.dtype

    @property
    def answer(self):
        """ok, unchecked, unknown, fallback, mismatch or unsupported (mpsprobe.vocabulary.ANSWERS)."""
        return self.klass


@dataclass
class Report:
    model_ops: ModelOps
    run: dict
    answers: list
    model_ms: Optional[dict] = None    # model_speed(): the whole step, the replayed calls as its breakdown
    recorded_in: Optional[str] = None  # the database a replay was recorded in
    batch_sweep: Optional[dict] = None  # check --run --batch: modelcheck.batches.sweep_and_record()

    @property
    def ops(self):
        """The per-op answers, most severe first."""
        return self.answers

    def counts(self):
        return Counter(a.klass for a in self.answers)

    def failing(self, fail_on):
        return [a for a in self.answers if a.klass in FAIL_ON[fail_on]]

    def exit_code(self, fail_on):
        return 1 if self.failing(fail_on) else 0

    def to_json(self, fail_on=FALLBACK):
        run = self.run
        return {
            "model": self.model_ops.model, "mode": self.model_ops.mode,
            "dtype": self.model_ops.dtype, "distinct_ops": self.model_ops.distinct,
            "run": {k: run.get(k) for k in ("id", "device", "device_name", "backend",
                                            "torch_version", "os_name", "os_version",
                                            "chip", "started", "state")},
            "counts": {name: self.counts().get(name, 0) for name in ANSWERS},
            "fallback_calls": sum(a.use.count for a in self.answers if a.klass == FALLBACK),
            "fail_on": fail_on, "exit_code": self.exit_code(fail_on),
            "ops": [{"aten_op": a.use.aten_op, "dtype": a.use.dtype, "class": a.klass,
                     "status": a.status, "note": a.note, "count": a.use.count,
                     "places": a.use.places, "probe_ops": a.via, "message": a.message,
                     "cpu_ms": a.timing[0] if a.timing else None,
                     "target_ms": a.timing[1] if a.timing else None}
                    for a in self.answers],
            **({"model_ms": self.model_ms} if self.model_ms else {}),
            **({"batch_sweep": self.batch_sweep} if self.batch_sweep else {}),
        }


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


def answer(conn, model_ops, run, model_ms=None, recorded_in=None):
    """The Report for `model_ops` against one run (a runs-table row)."""
    found = blame.evidence(conn, run["id"])
    answers = []
    for use in model_ops.ops:
        ev = found.get((use.aten_op, use.dtype))
        klass, status, note = blame.verdict(ev)
        plain = blame.out_of_place(use.aten_op) if klass == UNKNOWN else None
        if plain and found.get((plain, use.dtype)) is not None \
                and blame.verdict(found[plain, use.dtype])[0] != UNKNOWN:
            # The in-place op itself was never probed: say what its out-of-place form shows.
            ev = found[plain, use.dtype]
            klass, status, note = blame.verdict(ev)
            note = f"only the out-of-place op probed ({plain}: {note})"
        elif klass == UNKNOWN and ev is None:
            elsewhere = blame.other_dtypes(found, use.aten_op, use.dtype)
            if elsewhere:
                note = f"never probed in {use.dtype} (probed in {', '.join(elsewhere)})"
        answers.append(OpAnswer(use, klass, status, note, sorted(ev.via) if ev else [],
                                ev.messages[0] if ev and ev.messages else None,
                                blame.timing(ev)))
    answers.sort(key=lambda a: (ORDER[a.klass], a.use.aten_op, a.use.dtype or ""))
    return Report(model_ops, run, answers, model_ms, recorded_in)


def _names(answers, limit=3):
    names = [a.use.aten_op for a in answers]
    return ", ".join(names[:limit]) + (", …" if len(names) > limit else "")


def format_report(report, fail_on=FALLBACK):
    """The human-readable report, as a list of lines."""
    mo, run = report.model_ops, report.run
    target = f"{run['device']} ({run.get('device_name') or '?'})"
    where = " ".join(x for x in (run.get("os_name"), run.get("os_version")) if x)
    lines = [f"{mo.model} {mo.mode}, {mo.dtype} — {mo.distinct} distinct aten ops",
             f"answers from run {run['id'][:12]}: {target}, torch {run['torch_version']}, "
             f"{where}, {(run.get('started') or '')[:10]}"]
    if run.get("backend"):
        lines.append("  (a test backend: NOT a real device measurement)")
    summary = []
    for name in ANSWERS:
        group = [a for a in report.answers if a.klass == name]
        if group:
            shown = f" ({_names(group)})" if name not in (OK, UNCHECKED) else ""
            summary.append(f"{ANSWER[name].symbol} {len(group)} {ANSWER[name].label}{shown}")
    lines.append("  " + "   ".join(summary))
    if report.model_ms:
        lines += _speed_lines(report.model_ms, mo.mode, run["device"])
    fallback_calls = sum(a.use.count for a in report.answers if a.klass == FALLBACK)
    if fallback_calls:
        lines.append(f"  expected cost: {fallback_calls} CPU fallback call(s) per "
                     f"{'step' if mo.mode == 'forward+backward' else 'forward'}, "
                     "each copying its tensors to the CPU and back")
    lines.append("")
    width = max((len(a.use.aten_op) for a in report.answers), default=10)
    for a in report.answers:
        places = ", ".join(a.use.places[:3]) + (", …" if len(a.use.places) > 3 else "")
        timing = ""
        if a.timing:
            cpu_ms, target_ms = a.timing
            timing = f"; target {target_ms:.3g} ms vs CPU {cpu_ms:.3g} ms"
        lines.append(f"{ANSWER[a.klass].symbol} {a.use.aten_op:<{width}} {a.use.dtype or '-':<8} "
                     f"×{a.use.count:<4} {a.note}{timing}" + (f"  [{places}]" if places else ""))
        if a.klass in (UNSUPPORTED, MISMATCH, FALLBACK) and a.message:
            lines.append(f"    {a.message[:160]}")
    failing = report.failing(fail_on)
    lines.append("")
    lines.append(f"exit 1: {len(failing)} op(s) at or above --fail-on {fail_on}" if failing
                 else f"exit 0: nothing at or above --fail-on {fail_on}")
    if report.batch_sweep:
        from mpsprobe.modelcheck.batches import format_sweep
        lines += format_sweep(report.batch_sweep)
    if report.recorded_in:
        lines.append(f"recorded as run {run['id']} in {report.recorded_in}")
    return lines
