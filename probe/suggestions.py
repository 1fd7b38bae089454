"""What to try when an op does not work: a small table of workarounds, each with its source.

The site's op page shows them beside the messages seen; `check` shows them
under each failing op of a model (for_answer). A suggestion applies to a
(status, reason kind, dtype), or to one well-known op (BY_OP), and says what
to do and where that advice comes from.
"""
from collections import namedtuple

from mpsprobe.vocabulary import BROKEN, ERROR, FALLBACK, MISMATCH, REASON_KIND, UNSUPPORTED

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


CAST_COMPLEX64 = Suggestion(
    "Use complex64 instead of complex128 for this op: MPS has no double-precision types.", MPS_NOTES)
WRONG_NUMBERS = Suggestion(
    "Compare this op's output with the CPU's on your own data; if the error matters, run it on "
    "the CPU (x.cpu() … .to('mps')) or in float32.", MPS_NOTES)
OTHER_ARGUMENTS = Suggestion(
    "The MPS kernel refuses these arguments (sizes, modes; see the message): change them to ones "
    "it takes, or run this op on the CPU.", MPS_NOTES)

# Well-known ops, by aten name without its overload: an alternative that runs natively.
BY_OP = {
    "upsample_bicubic2d": Suggestion(
        "Use mode='bilinear' in F.interpolate (upsample_bilinear2d has an MPS kernel), or a torch "
        "with the Metal bicubic kernel (added in pytorch/pytorch#136123).",
        "https://github.com/pytorch/pytorch/pull/136123"),
    "_upsample_bicubic2d_aa": Suggestion(
        "Use antialias=False or mode='bilinear', or a torch with the antialiased bicubic kernel "
        "(added in pytorch/pytorch#149378).", "https://github.com/pytorch/pytorch/pull/149378"),
    "grid_sampler_3d": Suggestion(
        "The MPS kernel for 3-D grid_sample, where a torch has it, does bilinear interpolation "
        "only: keep mode='bilinear'; older torch versions need PYTORCH_ENABLE_MPS_FALLBACK=1.",
        "https://github.com/pytorch/pytorch/pull/160541"),
}


# A compiled case's failures: what to do is about the compiler, not the device's kernels.
COMPILER_TROUBLESHOOTING = "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html"
LEAVE_OUT_OF_COMPILE = Suggestion(
    "Keep this op out of the compiled region (torch.compiler.disable on the function that calls it): "
    "it runs eagerly there, as its eager answer says.", COMPILER_TROUBLESHOOTING)
GRAPH_BREAK = Suggestion(
    "Nothing to fix for correctness: the op runs eagerly on the target. A graph break costs speed; "
    "torch._dynamo.explain shows where it happens.", COMPILER_TROUBLESHOOTING)
BY_COMPILED_KIND = {REASON_KIND["compile_failed"].name: [LEAVE_OUT_OF_COMPILE],
                    REASON_KIND["compiled_fallback"].name: [GRAPH_BREAK]}


def _base(op):
    """"upsample_bicubic2d" for "aten::upsample_bicubic2d.vec"."""
    return op.rsplit("::", 1)[-1].split(".", 1)[0]


def _macos_key(version):
    return tuple(int(x) for x in str(version).split(".") if x.isdigit())


def upgrade_macos(min_macos, have=None, measured_on=None):
    """What to do about a kernel that needs macOS `min_macos`: `have`, the macOS of the Mac
    asking (None elsewhere); `measured_on`, the macOS the refusal was measured on."""
    if min_macos and have and _macos_key(have) >= _macos_key(min_macos):
        # The refusal says nothing about this Mac: only a measurement here does.
        return Suggestion(f"This kernel needs macOS {min_macos} and you have {have}: the refusal was measured "
                          f"on macOS {measured_on or 'an older version'}; measure on this Mac "
                          "(mpsprobe check MODEL --run --device mps).", MPS_NOTES)
    version = f" {min_macos}" if min_macos else " a newer version"
    told = f" (you have {have})" if have else f" (measured on macOS {measured_on})" if measured_on else ""
    return Suggestion(f"Upgrade macOS to{version}{told}: the MPS kernel needs it.", MPS_NOTES)


def for_case(op_id, status, reason_kind, dtype, message=None, min_macos=None, have_macos=None,
             measured_macos=None):
    """The suggestions that fit one failing (status, reason kind, dtype), most useful first.
    `have_macos`: the macOS of the Mac asking; `measured_macos`: the macOS of the answer."""
    if reason_kind in BY_COMPILED_KIND:
        return list(BY_COMPILED_KIND[reason_kind])
    found = [BY_OP[_base(op_id)]] if status in (UNSUPPORTED, FALLBACK) and _base(op_id) in BY_OP else []
    if reason_kind == "macos_version" or (message and "macOS" in message and status == UNSUPPORTED):
        found.append(upgrade_macos(min_macos, have_macos, measured_macos))
    if status == UNSUPPORTED:
        if dtype == "complex128":
            found.append(CAST_COMPLEX64)
        elif dtype == "float64" or reason_kind == "dtype" and dtype in ("float64", "complex128"):
            found.append(CAST_FLOAT32)
        elif reason_kind == "dtype" or (dtype or "") in ("float16", "bfloat16") and reason_kind != "no_kernel":
            found.append(CAST_FROM_LOW)
        if reason_kind in (None, "no_kernel") or (message and "not currently implemented" in message):
            found += [FALLBACK_SWITCH, KERNEL_REQUEST]
        if reason_kind == "argument":
            found.append(OTHER_ARGUMENTS)
    elif status == MISMATCH:
        found.append(WRONG_NUMBERS)
    elif status == FALLBACK:
        found += [NEWER_TORCH, KERNEL_REQUEST]
    elif status == ERROR:
        found.append(ON_CPU)
    return found


def unique(suggestions):
    """Each suggestion once, in first-seen order."""
    return list(dict.fromkeys(suggestions))


def for_answer(aten_op, status, reason_kinds, dtype, message=None, min_macos=None, have_macos=None,
               measured_macos=None):
    """The suggestions for one failing op of a model: `status` as check answers it
    (any broken status counts as unsupported), `reason_kinds` its failures' kinds,
    most frequent first."""
    status = UNSUPPORTED if status in BROKEN and status != ERROR else status
    found = []
    for kind in list(reason_kinds) or [None]:
        found += for_case(aten_op, status, kind, dtype, message, min_macos, have_macos, measured_macos)
    return unique(found)
