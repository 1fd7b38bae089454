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
from importlib import metadata

from mpsprobe.db.query import blame, knowledge, runs as runs_q
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


def installed_torch():
    """The installed torch's version, read without importing it (None when absent)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def answering(conn, run_id=None, torch=None, macos=None, device="auto"):
    """(the run that answers or None, a Declared or None) for check's question.

    An MPS question (`device` auto or mps, no `run_id`): the run picker's MPS
    run (mps_question) with its gaps declared for its release and macOS; a test
    backend's run alone; with no such run (or no database: `conn` None), the
    declarations of the `torch` release (default: the installed torch's) for
    `macos` (default: this Mac's, else a macOS new enough for every gate).
    Another device, or `run_id`: that run alone, whatever its device.
    """
    from .report import this_macos
    if run_id or (device or "auto").split(":", 1)[0] not in ("auto", "mps"):
        return runs_q.pick_run(conn, run_id=run_id, torch=torch, macos=macos, device=device), None
    try:
        chosen = conn and runs_q.pick_run(conn, torch=torch, macos=macos, device=device,
                                          mps_question=True)
    except runs_q.RunNotFound:
        chosen = None
    if chosen and chosen.get("backend"):
        return chosen, None
    kb = knowledge.load()
    if not chosen:
        release = knowledge.release_for(kb, torch, installed_torch())
        if release is None:
            raise knowledge.KnowledgeError(
                f"no measured MPS run, and the knowledge base starts at torch "
                f"{knowledge.releases(kb)[0]}: give --torch for a release it has")
        return None, Declared(release, macos or this_macos())
    measured_on = chosen.get("os_version") if chosen.get("os_name") == "macOS" else None
    release = knowledge.release_for(kb, installed=chosen["torch_version"])
    # A run older than every bundled release: its gaps stay unknown, not another release's.
    return chosen, release and Declared(release, macos or measured_on)
