"""Reading what a target says: fallback warnings and refusals, into statuses."""
import re

from mpsprobe.vocabulary import ERROR, UNSUPPORTED

# The exact texts of aten/src/ATen/mps/MPSFallback.mm.
MPS_FALLBACK_WARNING = re.compile(
    r"The operator '(aten::[\w.]+)' is not currently supported on the MPS backend "
    r"and will fall back to run on the CPU")
MPS_NOT_IMPLEMENTED = re.compile(
    r"The operator '(aten::[\w.]+)' is not currently implemented for the MPS device")
# Any backend without a kernel for the op: "Could not run 'aten::x' with arguments from the 'CUDA' backend".
NO_KERNEL = re.compile(r"Could not run '(aten::[\w.]+)' with arguments from the '\w+' backend")
# A kernel exists, but not for this dtype: '"addmm_cuda" not implemented for 'ComplexHalf''.
DTYPE_NOT_IMPLEMENTED = re.compile(r"\"(\w+)\" not implemented for '(\w+)'")
DTYPE_REFUSED = re.compile(
    r"(MPS|mps).*(does not support|doesn't support|not supported|unsupported)"
    r"|(does not support|doesn't support|not supported|unsupported).*(MPS|mps)"
    r"|does not have support for that dtype|Unsupported dtype|unsupported dtype"
    r"|not supported for (dtype|type)|supports? only"
    # dtype names as ATen prints them: "... not supported for Long", "HalfTensor is not supported"
    r"|(not supported|not implemented) for '?(Bool|Byte|Char|Short|Int|Long|Half|BFloat16|Float|"
    r"Double|ComplexHalf|ComplexFloat|ComplexDouble|UInt\d+|Float8\w*)\b"
    r"|\b(Bool|Byte|Char|Short|Int|Long|Half|BFloat16|Float|Double|Complex\w*)Tensor is not supported")
# An argument the op needs on the CPU, whatever device its input is on.
WANTS_CPU_ARGUMENT = re.compile(r"expected \w+ to be on cpu|must be on (the )?cpu", re.IGNORECASE)


def fallback_ops(messages):
    """The aten ops named by MPS CPU-fallback warnings among `messages`, in order, once each."""
    found = []
    for text in messages:
        for name in MPS_FALLBACK_WARNING.findall(text):
            if name not in found:
                found.append(name)
    return found


def classify_error(exc):
    """(status, aten_op, reason) for an exception the target raised."""
    text = str(exc)
    for pattern, reason in ((MPS_NOT_IMPLEMENTED, "not implemented for MPS"),
                            (NO_KERNEL, "no kernel for this device")):
        m = pattern.search(text)
        if m:
            return UNSUPPORTED, m.group(1), reason
    m = DTYPE_NOT_IMPLEMENTED.search(text)
    if m:
        return UNSUPPORTED, None, f"kernel {m.group(1)} not implemented for {m.group(2)}"
    if DTYPE_REFUSED.search(text):
        return UNSUPPORTED, None, "refused by the device"
    if isinstance(exc, NotImplementedError):
        return UNSUPPORTED, None, "NotImplementedError"
    return ERROR, None, f"{type(exc).__name__} on the target only"


def first_line(text, limit=500):
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
