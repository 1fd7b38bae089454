"""Answers from what PyTorch declares for MPS, when no measured MPS run answers.

One use of an op (aten op, dtype) is answered, in this order, from the
bundled knowledge base (mpsprobe.db.query.knowledge):

1. the MPS backend itself: a macOS older than the release's minimum runs nothing;
2. the MPS-wide rules (ops/declared/rules.py): no float64 or complex128 at
   all, bfloat16 and complex from macOS 14, ops gated on a macOS version;
3. the release's native_functions.yaml: an MPS kernel (declared to work),
   composite (decomposes into ops with kernels), or no MPS kernel (✗: it
   raises, or falls back to the CPU with PYTORCH_ENABLE_MPS_FALLBACK=1).

A declaration is not a measurement: an op declared to work is the answer
`declared`, never `ok`, and every answer says it rests on the declaration.
"""
from collections import Counter

from mpsprobe.db.query import blame, knowledge
from mpsprobe.ops.declared import rules as mps_rules
from mpsprobe.vocabulary import DECLARED, FALLBACK, UNKNOWN, UNSUPPORTED
from .matching import Match


class Declared:
    """The knowledge base's answers for one torch release and macOS (None: new enough)."""

    def __init__(self, release, macos=None, path=knowledge.DEFAULT):
        self.kb, self.release, self.macos, self.path = knowledge.load(path), release, macos, path
        entry = self.kb["releases"][release]
        self.python_kernels = set(entry["python_kernels"])
        self.yaml_read = knowledge.read_ok(self.kb, release, "native_functions.yaml")
        backend = knowledge.backend_macos(self.kb, release)
        self.min_macos = backend["min_macos"] if backend else None
        self.too_old = bool(backend) and mps_rules.below(macos, backend["min_macos"])
        self.source = f"{knowledge.DECLARED} {release}"

    def describe(self):
        """"declared by PyTorch 2.13.0 for macOS ≥ 14.0" (or for the macOS asked about)."""
        mac = f"macOS {self.macos}" if self.macos else f"macOS ≥ {self.min_macos}"
        return f"{self.source} for {mac}"

    def _condemned(self, status, note, kind, message=None, min_macos=None):
        ev = blame.Evidence(messages=[message] if message else [], kinds=Counter({kind: 1}),
                            min_macos={min_macos} if min_macos else set())
        return Match(UNSUPPORTED if status == UNSUPPORTED else FALLBACK, status, note, ev,
                     source=self.source)

    def match(self, use):
        op, dtype = use.aten_op, use.dtype
        if self.too_old:
            return self._condemned(UNSUPPORTED, f"torch {self.release}'s MPS backend needs macOS "
                                   f"{self.min_macos} or newer (declared)", "macos_version",
                                   min_macos=self.min_macos)
        rule = mps_rules.applying(op, dtype, self.macos, self.kb["rules"])
        if rule:
            gate = f" (macOS {self.macos} asked)" if rule["min_macos"] else ""
            return self._condemned(rule["status"], f"{rule['says']}{gate} (declared rule)",
                                   rule["reason_kind"], rule["example"], rule["min_macos"])
        kind = knowledge.kernel(self.release, op, self.path)
        if kind == "mps":
            where = " from Python (torch.library)" if op.split("::")[-1] in self.python_kernels \
                else " in native_functions.yaml"
            return Match(DECLARED, None, f"an MPS kernel declared{where}", None, source=self.source)
        if kind == "composite":
            return Match(DECLARED, None, "composite: no MPS kernel of its own, decomposes into ops "
                                         "that have theirs (declared)", None, source=self.source)
        if kind == "none":
            return self._condemned(UNSUPPORTED, "no MPS kernel (declared)", "no_kernel")
        why = (f"torch {self.release}'s native_functions.yaml could not be read" if not self.yaml_read
               else f"not in torch {self.release}'s native_functions.yaml: nothing declared")
        return Match(UNKNOWN, None, why, None, source=knowledge.NO_EVIDENCE)
