"""The one vocabulary of mpsprobe: statuses, reason kinds, passes, check kinds, answers.

Every other module (engine, store, CLI, check report, site) takes its words from
here; a test fails if a status word is spelt as a literal anywhere else. A
status says *what happened*; a reason kind says *why*, in a form a page or a
report can act on ("needs macOS 14", "falls back to the CPU").
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    name: str
    symbol: str      # one character for reports and compact cells, in fonts every machine has
    colour: str      # the site's text colour for it (with the symbol, so no colour alone carries meaning)
    background: str  # the site's cell and badge background for it
    label: str       # the words a porter reads in `check`
    meaning: str     # one line, shown on the legend page


# Ordered from least to most severe: a roll-up over several cases reports the
# worst status present, so `skip` only survives when nothing ran.
_STATUSES = (
    Status("skip", "·", "#57606a", "#eef1f4", "no ground truth",
           "No ground truth for this sample: the reference itself failed, or the sample has no unique answer."),
    Status("pass", "✓", "#1a7f37", "#dafbe1", "native and correct",
           "Ran natively on the target and matched the CPU within the tolerance policy."),
    Status("fallback", "⚠", "#9a6700", "#fff1c2", "falls back to the CPU",
           "Ran, but some of the work ran on the CPU (the generic MPS fallback or a kernel's own)."),
    Status("mismatch", "≠", "#bc4c00", "#ffdfc8", "wrong numbers",
           "Ran natively, but values, distribution, NaN pattern, shape, dtype or device differ beyond tolerance."),
    Status("unsupported", "✗", "#a40e26", "#ffd7dc", "unsupported",
           "The target refused it; the reason kind says why (no kernel, dtype, macOS version, size limit)."),
    Status("error", "!", "#8250df", "#ece2ff", "raises an error",
           "The target raised something else while the reference succeeded: a bug."),
    # ∞, not an hourglass: the hourglass signs (⧗, ⌛) are missing from common fonts or drawn as emoji.
    Status("timeout", "∞", "#0b5cad", "#d6e9ff", "hangs",
           "The case exceeded its time budget; the worker was killed."),
    Status("crash", "☠", "#ffffff", "#3d1019", "crashes the process",
           "The worker process died on this case, and again when it ran in another worker (signal and last stderr lines kept)."),
)

STATUS = {s.name: s for s in _STATUSES}
STATUSES = tuple(s.name for s in _STATUSES)
RANK = {name: rank for rank, name in enumerate(STATUSES)}

SKIP, PASS, FALLBACK, MISMATCH, UNSUPPORTED, ERROR, TIMEOUT, CRASH = STATUSES

# Statuses that mean "this works on the target" for a user's purposes.
WORKING = (SKIP, PASS)
# Statuses that mean the target ran the op and returned something.
RAN = (PASS, FALLBACK, MISMATCH)
# Statuses that mean the op does not work on the target as it is.
FAILING = tuple(s for s in STATUSES if s not in WORKING)


def worst(statuses):
    """The most severe status among `statuses` (None for an empty input)."""
    ranked = [RANK[s] for s in statuses if s in RANK]
    return STATUSES[max(ranked)] if ranked else None


def is_status(value):
    return value in RANK


@dataclass(frozen=True)
class ReasonKind:
    name: str
    statuses: tuple  # the statuses this reason can explain
    label: str       # how a page or report says it, e.g. "needs a newer macOS"
    meaning: str


_REASON_KINDS = (
    ReasonKind("no_kernel", (UNSUPPORTED, CRASH), "no kernel for this device",
               "The op has no implementation for the target (a crash can name it too)."),
    ReasonKind("dtype", (UNSUPPORTED, CRASH), "dtype not supported",
               "The op exists on the target, but not for this dtype."),
    ReasonKind("macos_version", (UNSUPPORTED, CRASH), "needs a newer macOS",
               "The target refuses below a minimum macOS version, recorded with the result."),
    ReasonKind("size_limit", (UNSUPPORTED, CRASH), "size or rank limit",
               "The target refuses tensors this large, or with this many dimensions."),
    ReasonKind("argument", (UNSUPPORTED, CRASH), "argument not supported",
               "The op exists for this dtype, but not for an argument value this sample uses."),
    ReasonKind("out_of_memory", (ERROR, CRASH), "out of memory",
               "The target ran out of memory, even after its cache was emptied and the case retried."),
    ReasonKind("device_placement", (ERROR, CRASH), "wrong device",
               "The op mixed devices or produced its output on the wrong device."),
    ReasonKind("cpu_fallback", (FALLBACK,), "falls back to the CPU",
               "PyTorch's generic fallback ran the op on the CPU (PYTORCH_ENABLE_MPS_FALLBACK=1)."),
    ReasonKind("kernel_fallback", (FALLBACK,), "kernel falls back to the CPU",
               "The target's own kernel ran the work on the CPU, e.g. below a macOS version (recorded)."),
    ReasonKind("reduced_precision", (PASS, MISMATCH, SKIP), "reduced-precision mode",
               "The kernel ran in a reduced-precision mode (e.g. TF32, fast math); judged against that mode's error "
               "(skipped where that error cannot be bounded for the op)."),
    ReasonKind("summation_order", (PASS,), "another summation order",
               "A sum, matmul or convolution that differs from the CPU by its order of summation "
               "(blocked, split, Winograd, FFT): within the error any order may make, derived from "
               "the number of terms, their magnitudes and the accumulating precision."),
    ReasonKind("distribution", (PASS, MISMATCH), "checked as a distribution",
               "A random op: judged by a statistical test with a stated false-alarm rate."),
    ReasonKind("values", (MISMATCH,), "wrong values",
               "Values differ from the CPU beyond the tolerance policy."),
    ReasonKind("trivial_answer", (MISMATCH,), "trivially wrong answer",
               "The output is no better than zeros, the input unchanged or NaN."),
    ReasonKind("nonfinite", (MISMATCH,), "NaN/Inf pattern differs", "NaN or Inf where the CPU has none, or the reverse."),
    ReasonKind("metadata", (MISMATCH,), "shape, dtype or device differs",
               "The output's shape, dtype or device differs from the CPU's."),
    ReasonKind("bug", (ERROR,), "raises on the target only", "The target raised while the CPU succeeded."),
    ReasonKind("signal", (CRASH,), "process died", "The worker died: a signal or an abort (its last stderr lines kept)."),
    ReasonKind("exit", (CRASH,), "process exited", "The worker exited during the case (SystemExit, os._exit)."),
    ReasonKind("hang", (TIMEOUT,), "hangs", "The case ran past its time budget."),
    ReasonKind("reference_failed", (SKIP,), "the CPU reference failed",
               "The CPU could not run this sample, so there is nothing to compare with."),
    ReasonKind("no_unique_answer", (SKIP,), "no unique answer",
               "This sample has no unique answer (ties, free phases, empty tensors)."),
    ReasonKind("forward_failed", (SKIP,), "the forward already fails",
               "A backward, in-place or out= case whose forward fails or differs on the target "
               "(recorded in the forward case): this pass cannot be judged on its own."),
    ReasonKind("probe_fault", (SKIP,), "mpsprobe could not judge it",
               "The probe's own code failed on this case (its exception kept): no verdict either way, "
               "never counted as the target's bug."),
    ReasonKind("no_gradient", (SKIP,), "nothing to differentiate",
               "A backward case whose sample has no input that requires grad or no "
               "differentiable output."),
    # The compiled pass's own two failures, apart from the eager ones.
    ReasonKind("compiled_fallback", (FALLBACK,), "the compiler leaves it to eager",
               "Under torch.compile, part of the op was not compiled: a graph break, or an op with no "
               "lowering that the generated code calls as an eager kernel on the target (named in "
               "fallback_ops). Not a CPU fallback: it still runs on the target."),
    ReasonKind("compile_failed", (ERROR,), "compiling it fails",
               "torch.compile raised while compiling the op for the target, where the eager op ran "
               "(the exception's family and message kept)."),
)

REASON_KIND = {r.name: r for r in _REASON_KINDS}
REASON_KINDS = tuple(r.name for r in _REASON_KINDS)
PROBE_FAULT = REASON_KIND["probe_fault"].name

# Which pass of an op a case exercises. `compiled`: the op's forward through
# torch.compile on the target, judged against the same CPU reference as eager.
PASSES = ("forward", "backward", "inplace", "out", "compiled")
FORWARD, BACKWARD, INPLACE, OUT, COMPILED = PASSES
# The passes a sweep runs unless told otherwise (compiling every op costs minutes).
EAGER_PASSES = (FORWARD, BACKWARD, INPLACE, OUT)

# How far an output could be checked.
CHECK_KINDS = ("values", "distribution", "shape", "none")


# -- what `check` answers per aten op of a model -------------------------------
# An answer is a status where the evidence places one on the op, or one of
# four words of its own: never probed, declared to work by PyTorch (not
# measured), ran but values unchecked, correct.

@dataclass(frozen=True)
class Answer:
    name: str
    symbol: str
    label: str       # after a count: "2 fall back to CPU"


UNKNOWN, DECLARED, UNCHECKED, OK = "unknown", "declared", "unchecked", "ok"

# Most severe first: the report's summary line keeps this order.
_ANSWERS = (
    Answer(UNSUPPORTED, STATUS[UNSUPPORTED].symbol, STATUS[UNSUPPORTED].label),
    Answer(MISMATCH, STATUS[MISMATCH].symbol, STATUS[MISMATCH].label),
    Answer(FALLBACK, STATUS[FALLBACK].symbol, "fall back to CPU"),
    Answer(UNKNOWN, "?", "never probed"),
    Answer(DECLARED, "○", "declared to work, not measured"),
    Answer(UNCHECKED, "~", "native, values unchecked"),
    Answer(OK, STATUS[PASS].symbol, STATUS[PASS].label),
)
ANSWER = {a.name: a for a in _ANSWERS}
ANSWERS = tuple(a.name for a in _ANSWERS)

# How much an unknown (`?`) answer should worry a porter, least known first.
NEVER_PROBED = "never probed anywhere"             # no case of the run dispatched the op
OTHER_DTYPES = "probed only in other dtypes"
RELATED_ONLY = "only a related variant probed"     # its in-place/out-of-place form, another overload
FAILING_ONLY = "only seen in failing cases"        # dispatched, but never proven either way
# A case that ran the op in this dtype and others failed on it: which call failed is not known.
DTYPE_UNSURE = "failed in a case that ran it in several dtypes"
CONFIDENCES = (NEVER_PROBED, OTHER_DTYPES, RELATED_ONLY, FAILING_ONLY, DTYPE_UNSURE)

# The start of the reason of a case refused while its inputs moved to the target
# (MPS refuses float64 there): nothing ran on the target.
REFUSED_AT_TRANSFER = "inputs cannot be moved to the target"

# A worker died in a case, and the case, run again in another worker, ran to a result: the
# run's event kind, and the key of the case's notes that names the death (the pool's crash rule).
CRASH_NOT_REPRODUCED = "crash_not_reproduced"

# `check --fail-on LEVEL`: the answers that make it exit 1. Below the level, an
# unknown answer still keeps the exit status from 0 (NO_ANSWER_EXIT): no evidence is no "yes".
FAIL_ON = {
    DECLARED: (UNSUPPORTED, MISMATCH, FALLBACK, UNKNOWN, DECLARED),
    UNKNOWN: (UNSUPPORTED, MISMATCH, FALLBACK, UNKNOWN),
    FALLBACK: (UNSUPPORTED, MISMATCH, FALLBACK),
    MISMATCH: (UNSUPPORTED, MISMATCH),
    UNSUPPORTED: (UNSUPPORTED,),
    "never": (),
}
NO_ANSWER_EXIT = 3

# Statuses a case can end in that say the target broke, not that it judged
# wrongly: the op is as good as unsupported for a user.
BROKEN = (UNSUPPORTED, ERROR, TIMEOUT, CRASH)
# Statuses where the target did not give a correct native answer.
FAILED = (MISMATCH,) + BROKEN

# The column of results (and of the roll-up views) that names a case's pass.
# Its name is also a status word, so code spells it through this constant.
PASS_COLUMN = "pass"


# -- what a grid cell answers for an op on one release of one device -----------
# One word over the dtypes in view, as MDN and caniuse answer per browser and
# version: each dtype works (every case native and correct, or without ground
# truth), fails, or is unknown; fallback to the CPU is partial support.

@dataclass(frozen=True)
class Support:
    name: str
    symbol: str
    colours: str     # the status whose colours it borrows
    meaning: str


SUPPORTED, PARTIAL, NO_SUPPORT, UNKNOWN_SUPPORT = "supported", "partial", UNSUPPORTED, UNKNOWN
_SUPPORTS = (
    Support(SUPPORTED, STATUS[PASS].symbol, PASS, "Works natively and correctly in every dtype in view."),
    Support(PARTIAL, "◐", FALLBACK,
            "Works in some dtypes in view, or falls back to the CPU: the note says which."),
    Support(NO_SUPPORT, STATUS[UNSUPPORTED].symbol, UNSUPPORTED,
            "Works in none of the dtypes in view (refused, wrong numbers, errors or crashes)."),
    Support(UNKNOWN_SUPPORT, "?", SKIP, "No verdict: nothing in view has ground truth."),
)
SUPPORT = {s.name: s for s in _SUPPORTS}
SUPPORTS = tuple(s.name for s in _SUPPORTS)
