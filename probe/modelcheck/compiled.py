"""`check --compiled`: will the model's ops work through torch.compile on the target?

Answered per (aten op, dtype) from a run's `compiled` cases (each op's forward
through torch.compile, judged against the CPU as eager is), by the same blame
and ranks as the eager answer (mpsprobe.db.query.knowledge): measured on MPS,
bare metal before a virtual machine. PyTorch declares nothing about compiled
forms, so no declaration fills a gap: without a measured compiled run the
compiled answer is unknown, and says so. A CPU or CUDA compiled run never
answers an MPS question; it is named beside, as not MPS evidence.

A compiled case's `fallback` is the compiler leaving an op to eager on the
target (a graph break, an op with no lowering): it still runs on the target.
"""
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from mpsprobe import suggestions as advice
from mpsprobe.db.query import knowledge
from mpsprobe.db.query.runs import (RunNotFound, answers_mps, describe, evidence_rank, has_pass, list_runs,
                                   pick_run)
from mpsprobe.vocabulary import (ANSWER, ANSWERS, COMPILED, FALLBACK, MISMATCH, NEVER_PROBED, OK,
                                 REASON_KIND, UNCHECKED, UNKNOWN, UNSUPPORTED)
from .matching import Evidence, Match
from .report import ORDER, exit_line, exit_status

# How the compiled answers' summary says each class where the eager words would mislead.
LABELS = {FALLBACK: REASON_KIND["compiled_fallback"].label, UNKNOWN: "no compiled evidence",
          OK: "compiled, correct"}
NOT_DECLARED = "PyTorch declares nothing about compiled forms"


@dataclass
class CompiledAnswer:
    use: object                     # the model's OpUse
    klass: str                      # vocabulary.ANSWERS, from the compiled cases
    status: Optional[str]
    note: str
    eager: object                   # the eager OpAnswer of the same use, shown beside
    fallback_ops: list = field(default_factory=list)   # the ops the compiler left to eager
    message: Optional[str] = None
    suggestions: list = field(default_factory=list)   # suggestions.Suggestion, for failing ops

    def to_json(self):
        return {"aten_op": self.use.aten_op, "dtype": self.use.dtype, "class": self.klass,
                "status": self.status, "note": self.note, "count": self.use.count,
                "fallback_ops": self.fallback_ops, "message": self.message,
                "suggestions": [{"text": x.text, "source": x.source} for x in self.suggestions],
                "eager": {"class": self.eager.klass, "note": self.eager.note} if self.eager else None}


@dataclass
class Compiled:
    """The compiled answer of a report: `run` answers it (None: no run does)."""
    question: str                   # the device asked about ("mps", "cuda", …)
    run: Optional[dict]
    answers: list
    beside: list = field(default_factory=list)   # other-device compiled runs (not MPS evidence)
    why_none: Optional[str] = None               # why no run answers, in words

    def counts(self):
        return Counter(a.klass for a in self.answers)

    def exit_code(self, fail_on):
        """As the eager report's: 1 at or above `fail_on`, 3 when an answer rests on no evidence."""
        return exit_status(self.answers, fail_on)

    def rank(self):
        return evidence_rank(self.run) if self.run else knowledge.NO_EVIDENCE

    def to_json(self, fail_on):
        run = self.run or {}
        return {"question": self.question, "rank": self.rank(), "run_id": run.get("id"),
                "run": describe(run) if run else None, "why_none": self.why_none, "beside": self.beside,
                "counts": {name: self.counts().get(name, 0) for name in ANSWERS},
                "exit_code": self.exit_code(fail_on), "ops": [a.to_json() for a in self.answers]}


def _question(device):
    return (device or "auto").split(":", 1)[0].replace("auto", "mps")


def _pick(conn, run_id, torch, macos, device):
    """(the run whose compiled cases answer, or None; why none, in words)."""
    question = _question(device)
    if conn is None:
        return None, "no database"
    try:
        if run_id:
            run = pick_run(conn, run_id=run_id)
            if not has_pass(conn, run, COMPILED):
                return None, f"run {run['id'][:12]} has no compiled cases"
            return run, None
        return pick_run(conn, torch=torch, macos=macos, device=None if question == "mps" else device,
                        mps_question=question == "mps", pass_=COMPILED), None
    except RunNotFound:
        return None, f"no measured compiled run on {question.upper() if question == 'mps' else question}"


def answer(conn, model_ops, eager_answers, device="auto", run_id=None, torch=None, macos=None):
    """The Compiled answer for `model_ops`, each beside its eager answer (`eager_answers`,
    the report's OpAnswers)."""
    run, why_none = _pick(conn, run_id, torch, macos, device)
    # A run asked for by id answers for its own device, whatever it is.
    question = _question(run["device"] if run and run_id else device)
    eager = {(a.use.aten_op, a.use.dtype): a for a in eager_answers}
    evidence = Evidence(conn, run["id"], passes=(COMPILED,)) if run else None
    answers = []
    for use in model_ops.ops:
        m = evidence.match(use) if evidence else Match(UNKNOWN, None, f"{why_none}: {NOT_DECLARED}", None)
        ev = m.ev
        note = "no compiled case ran it" if m.note == NEVER_PROBED else m.note
        fell_back = sorted(ev.fell_back) if ev and m.klass == FALLBACK else []
        failing = m.klass in (UNSUPPORTED, MISMATCH, FALLBACK)
        message = ev.messages[0] if ev and ev.messages and failing else None
        kinds = [k for k, _ in ev.kinds.most_common()] if ev else []
        tips = advice.for_answer(use.aten_op, m.status, kinds, use.dtype, message) if failing else []
        if m.klass == MISMATCH:   # wrong only when compiled: eager is the workaround
            tips = [advice.LEAVE_OUT_OF_COMPILE] + tips
        answers.append(CompiledAnswer(use, m.klass, m.status, note, eager.get((use.aten_op, use.dtype)),
                                      fell_back, message, tips))
    answers.sort(key=lambda a: (ORDER[a.klass], a.use.aten_op, a.use.dtype or ""))
    beside = []
    if conn is not None and question == "mps" and not run_id:
        beside = [describe(r) for r in list_runs(conn, with_results_only=True)
                  if not answers_mps(r) and has_pass(conn, r, COMPILED)]
    return Compiled(question, run, answers, beside, why_none)


def _symbol(klass):
    return ANSWER[klass].symbol


def format_lines(compiled, fail_on, db_path=None):
    """The compiled part of check's report, as lines: what it rests on, the summary, each
    op's compiled answer with its eager one beside, and the exit line."""
    run = compiled.run
    question = "MPS" if compiled.question == "mps" else compiled.question
    if run is None:
        lines = [f"compiled (torch.compile) on {question}: {knowledge.NO_EVIDENCE}: {compiled.why_none}"
                 f"{' in ' + db_path if db_path else ''} ({NOT_DECLARED}; record one with "
                 f"`mpsprobe run --passes compiled`): every compiled answer is unknown"]
    else:
        rank = compiled.rank()
        said = f"measured on {run['device']}, not MPS" if rank == knowledge.OTHER_DEVICE else rank
        lines = [f"compiled (torch.compile) on {question}: {said}: answers from the compiled cases of run "
                 f"{run['id'][:12]} ({describe(run)}, {(run.get('started') or '')[:10]})"]
        if run.get("backend"):
            lines.append("  (a test backend: NOT a real device measurement)")
    if compiled.beside:
        shown = "; ".join(compiled.beside[:2]) + ("; …" if len(compiled.beside) > 2 else "")
        lines.append(f"  beside it, not MPS evidence: {len(compiled.beside)} compiled run(s) ({shown}): "
                     "--device or --run-id shows one's answers")
    counts = compiled.counts()
    summary = []
    for name in ANSWERS:
        group = [a for a in compiled.answers if a.klass == name]
        if group:
            names = list(dict.fromkeys(a.use.aten_op for a in group))
            shown = f" ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})" \
                if name not in (OK, UNCHECKED) and run is not None else ""
            summary.append(f"{_symbol(name)} {counts[name]} {LABELS.get(name, ANSWER[name].label)}{shown}")
    lines.append("  " + "   ".join(summary))
    lines.append("")
    if run is not None:
        width = max((len(a.use.aten_op) for a in compiled.answers), default=10)
        for a in compiled.answers:
            eager = f"   [eager: {_symbol(a.eager.klass)} {a.eager.note}]" if a.eager else ""
            lines.append(f"{_symbol(a.klass)} {a.use.aten_op:<{width}} {a.use.dtype or '-':<9} "
                         f"×{a.use.count:<4} {a.note}{eager}")
            if a.klass == FALLBACK and a.fallback_ops:
                lines.append(f"    left to eager on {run['device']}: {', '.join(a.fallback_ops)}")
            if a.message:
                lines.append(f"    {a.message[:160]}")
            lines += [f"    → {tip.text} ({tip.source})" for tip in a.suggestions]
        lines.append("")
    lines.append(exit_line(compiled.answers, fail_on, compiled.exit_code(fail_on), "compiled evidence",
                           " when compiled"))
    return lines

