"""What to try when an op does not work: a small table of workarounds, each with its source.

The site's op page shows them beside the messages seen; `check` can give the
same advice for a model's ops. A suggestion applies to a (status, reason kind,
dtype) and says what to do and where that advice comes from.
"""
from collections import namedtuple

from mpsprobe.vocabulary import ERROR, FALLBACK, UNSUPPORTED

Suggestion = namedtuple("Suggestion", "text source")

MPS_NOTES = "https://pytorch.org/docs/stable/notes/mps.html"
MPS_ENV = "https://pytorch.org/docs/stable/mps_environment_variables.html"
MPS_FALLBACK_ISSUE = "https://github.com/pytorch/pytorch/issues/77764"

FALLBACK_SWITCH = Suggestion(
    "Set PYTORCH_ENABLE_MPS_FALLBACK=1 before starting Python: ops without an MPS kernel "
    "then run on the CPU (slower, but they run).", MPS_ENV)
CAST_FLOAT32 = Suggestion(
    "Cast to float32 for this op (x.float()) and back afterwards: MPS supports float32 "
    "everywhere it supports the op; float64 is not supported on MPS at all.", MPS_NOTES)
CAST_FROM_LOW = Suggestion(
    "Run this op in float32 (x.float(), then .to(dtype)): MPS kernels often lack "
    "float16/bfloat16 or integer variants.", MPS_NOTES)
ON_CPU = Suggestion(
    "Compute this op on the CPU and move the result back (x.cpu() … .to('mps')).", MPS_NOTES)
KERNEL_REQUEST = Suggestion(
    "Check or upvote PyTorch's tracking issue for MPS op coverage.", MPS_FALLBACK_ISSUE)
NEWER_TORCH = Suggestion(
    "A newer torch may have a native kernel: see the op's grid row.", MPS_NOTES)


def upgrade_macos(min_macos):
    version = f" {min_macos}" if min_macos else ""
    return Suggestion(f"Upgrade macOS to{version or ' a newer version'}: the MPS kernel needs it.",
                      MPS_NOTES)


def for_case(op_id, status, reason_kind, dtype, message=None, min_macos=None):
    """The suggestions that fit one failing (status, reason kind, dtype), most useful first."""
    found = []
    if reason_kind == "macos_version" or (message and "macOS" in message and status == UNSUPPORTED):
        found.append(upgrade_macos(min_macos))
    if status == UNSUPPORTED:
        if dtype == "float64" or reason_kind == "dtype" and dtype in ("float64", "complex128"):
            found.append(CAST_FLOAT32)
        elif reason_kind == "dtype" or (dtype or "") in ("float16", "bfloat16") and reason_kind != "no_kernel":
            found.append(CAST_FROM_LOW)
        if reason_kind in (None, "no_kernel") or (message and "not currently implemented" in message):
            found += [FALLBACK_SWITCH, KERNEL_REQUEST]
    elif status == FALLBACK:
        found += [NEWER_TORCH, KERNEL_REQUEST]
    elif status == ERROR:
        found.append(ON_CPU)
    return found


def unique(suggestions):
    """Each suggestion once, in first-seen order."""
    return list(dict.fromkeys(suggestions))
