"""Which evidence answers one use of an op: the model's own variants first.

A probe run's evidence is kept per (aten op, dtype) and per kernel variant
(the input's rank and the arguments that choose a kernel: mpsprobe.engine.aten.variant).
A model's use of an op is answered from the cases that ran the variants the
model runs: a 5-D convolution failing says nothing of a ResNet's 2-D ones.
When no case ran the model's variants, the op-wide answer stands only if every
variant probed agrees (passes on empty inputs aside), and the note says the
evidence is from other shapes; if they disagree, the answer is unknown. A dtype the target refuses outright
(MPS and float64) condemns every op the model runs in it.
"""
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from mpsprobe.db.query import blame
from mpsprobe.vocabulary import (DTYPE_UNSURE, EAGER_PASSES, FAILING_ONLY, FALLBACK, MISMATCH, NEVER_PROBED,
                                 OTHER_DTYPES, RELATED_ONLY, UNKNOWN, UNSUPPORTED)

FAILING = (UNSUPPORTED, MISMATCH, FALLBACK)


@dataclass
class Match:
    klass: str
    status: Optional[str]
    note: str
    ev: Optional[blame.Evidence]
    confidence: Optional[str] = None    # for unknown answers (vocabulary.CONFIDENCES)
    source: Optional[str] = None        # what it rests on, when not the report's run (knowledge.RANKS)


class Evidence:
    """One run's evidence, read once: per op, per variant, and the dtypes refused outright.

    `fallback`: a declared.Declared that answers the ops the run leaves unknown
    (for a real MPS run: its gaps filled from what PyTorch declares, said so).
    `passes`: whose cases answer (blame.evidence): the eager ones, or the compiled one."""

    def __init__(self, conn, run_id, fallback=None, passes=EAGER_PASSES):
        self.fallback = fallback
        self.found = blame.evidence(conn, run_id, passes=passes)
        self.variants = {}
        for (op, dtype, variant), ev in blame.evidence(conn, run_id, by_variant=True, passes=passes).items():
            self.variants.setdefault((op, dtype), {})[variant] = ev
        self.refused = blame.refused_dtypes(conn, run_id, passes)
        self.names = {op for op, _ in self.found}

    def match(self, use):
        """The Match for one OpUse."""
        op, dtype = use.aten_op, use.dtype
        ev = self.found.get((op, dtype))
        klass, status, note = blame.verdict(ev)
        found = Match(klass, status, note, ev)
        if ev is not None and use.variants:
            found = self._by_variant(use, found)
        if found.klass == UNKNOWN:
            found = self._unknown(use, found)
        if found.klass == UNKNOWN and self.fallback is not None:
            declared = self.fallback.match(use)
            if declared.klass != UNKNOWN:
                declared.note = f"{declared.note}; the run: {found.note}"
                return declared
        return found

    def _by_variant(self, use, op_wide):
        probed = self.variants.get((use.aten_op, use.dtype), {})
        if not probed or set(probed) == {None}:
            return op_wide       # recorded before variants were: answered per op
        verdicts = {v: blame.verdict(e)[0] for v, e in probed.items()}
        mine = [v for v in use.variants if v in probed]
        missing = [v for v in use.variants if v not in probed]
        named = sorted(v for v in probed if v is not None)
        if mine:
            ev = sum((probed[v] for v in mine[1:]), probed[mine[0]])
            klass, status, note = blame.verdict(ev)
            worse = sorted(v for v in named if v not in mine and verdicts[v] in FAILING
                           and verdicts[v] != klass)
            if worse:
                note += f"; fails only with inputs the model does not use ({', '.join(worse)})"
            if missing:
                note += f"; the model's {', '.join(missing)} never probed"
            return Match(klass, status, note, ev)
        if op_wide.ev.at_transfer and op_wide.klass == UNSUPPORTED:
            return op_wide       # a refused dtype: refused whatever the shape
        # Empty inputs run no arithmetic: their passes do not contradict a failure.
        agreeing = {k for v, k in verdicts.items() if k != UNKNOWN and not _empty(v)}
        if len(agreeing) <= 1:
            return Match(op_wide.klass, op_wide.status,
                         f"{op_wide.note}; evidence only from other shapes (probed: "
                         f"{', '.join(named) or 'unrecorded'}; the model's: {', '.join(use.variants)})",
                         op_wide.ev)
        by_class = "; ".join(f"{v}: {verdicts[v]}" for v in named)
        return Match(UNKNOWN, None, f"depends on the shape ({by_class}); the model's "
                                    f"{', '.join(use.variants)} never probed", op_wide.ev, RELATED_ONLY)

    def _unknown(self, use, found):
        op, dtype = use.aten_op, use.dtype
        plain = blame.out_of_place(op)
        if plain and self.found.get((plain, dtype)) is not None:
            k, s, n = blame.verdict(self.found[plain, dtype])
            if k != UNKNOWN:
                # The in-place op itself was never probed: say what its out-of-place form shows.
                return Match(k, s, f"only the out-of-place op probed ({plain}: {n})",
                             self.found[plain, dtype], RELATED_ONLY)
        if dtype in self.refused:
            cases, message = self.refused[dtype]
            ev = blame.Evidence(blamed=Counter({UNSUPPORTED: cases}), messages=[message] if message else [],
                                kinds=Counter({"dtype": cases}))
            return Match(UNSUPPORTED, UNSUPPORTED,
                         f"the target refuses {dtype} tensors ({cases} probe case(s) refused "
                         f"while moving their inputs); this op was never probed in {dtype}", ev)
        if found.ev is not None and found.ev.via:
            unsure = found.ev.unsure and not found.ev.failures
            return Match(UNKNOWN, None, found.note, found.ev,
                         found.confidence or (DTYPE_UNSURE if unsure else FAILING_ONLY))
        elsewhere = blame.other_dtypes(self.found, op, dtype)
        if elsewhere:
            return Match(UNKNOWN, None, f"never probed in {dtype} (probed in {', '.join(elsewhere)})",
                         None, OTHER_DTYPES)
        related = sorted(self._related(op))
        if related:
            shown = ", ".join(related[:3]) + (", …" if len(related) > 3 else "")
            return Match(UNKNOWN, None, f"never probed; only related ops probed ({shown})",
                         None, RELATED_ONLY)
        return Match(UNKNOWN, None, NEVER_PROBED, None, NEVER_PROBED)

    def _related(self, op):
        """Other overloads and the in-place/out-of-place forms of `op` that the run probed."""
        def stem(name):
            base = name.split(".", 1)[0]
            return base[:-1] if base.endswith("_") and not base.endswith("__") else base
        return {name for name in self.names if name != op and stem(name) == stem(op)}


def _empty(variant):
    return variant is not None and " empty" in variant
