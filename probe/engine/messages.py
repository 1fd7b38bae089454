"""Every way a real Mac says no, as data: the MPS message catalogue.

Each `MessageFamily` is one distinct message that PyTorch (or a library on top
of it) raises, warns or prints when something does not run natively on MPS:
its pattern, the status and reason kind it means, the fields it names (the op
in any namespace, the dtype, the minimum macOS), and where the text comes from.

Provenance. Each family names the PyTorch source file that holds the text and
the release tags at which the text was seen. A tag is listed only when the
literal text (or, for texts built by `c10::str` from pieces, each literal
piece) is present in the `libtorch_cpu.dylib` of that release's macOS arm64
wheel, the binary built from that tag, checked for v1.12.0, v1.13.0, v2.0.0,
v2.3.0, v2.6.0, v2.9.0, v2.13.0 and v2.14.1. Where the PyTorch source file is
not known exactly, the path is the folder `aten/src/ATen/native/mps`; the
families in `READ_IN_SOURCE` were also read in the source text itself (how
`c10::str` joins the pieces), the others name the file that holds the op's MPS
kernel. Families
seen only in user reports (extensions such as mmcv, macOS's own Metal
assertions, MPSGraph's compiler) name the report instead, and so do PyTorch
texts whose tags were not checked in the binaries (a comment names their file).

Three readers use the catalogue:

* `classify_message(text, exc_type=...)`: the verdict for an exception's text,
  a drop-in for `classify.classify_error` (see `classify_error` below), with
  the generic non-MPS patterns kept (CUDA, cuDNN, any backend's missing kernel).
* `fallback_from_warning(text)`: whether a warning says that work ran on the
  CPU, by meaning rather than by one wording. PyTorch's generic fallback is
  `cpu_fallback`; a kernel's own fallback (often below a macOS version) is
  `kernel_fallback`, with the minimum macOS where the text names one.
* `crash_evidence(stderr_tail)`: what a dead worker's last stderr lines say
  (an uncaught C++ exception, a Metal or MPS failed assertion, MPSGraph
  failing to compile a kernel's graph), and the op.

No torch import: the catalogue is plain text matching.
"""
import re
from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

from mpsprobe.vocabulary import CRASH, ERROR, FALLBACK, REASON_KIND, REASON_KINDS, STATUSES, UNSUPPORTED

# Where a text appears.
RAISED = "raised"     # the text of an exception
WARNED = "warned"     # the text of a Python warning (TORCH_WARN, TORCH_WARN_ONCE)
PRINTED = "printed"   # a line a dying process prints to stderr before it dies

CHANNELS = (RAISED, WARNED, PRINTED)

ALL_TAGS = ("v1.12.0", "v1.13.0", "v2.0.0", "v2.3.0", "v2.6.0", "v2.9.0", "v2.13.0", "v2.14.1")

MPS_FOLDER = "aten/src/ATen/native/mps"
OPS = "aten/src/ATen/native/mps/operations/"


@dataclass(frozen=True)
class MessageFamily:
    """One distinct message: how to recognise it, what it means, where it comes from."""
    name: str                      # identifier, unique in the catalogue
    title: str                     # one line a person reads
    pattern: "re.Pattern"          # named groups: op, dtype, min_macos
    status: Optional[str]          # vocabulary status; None for a notice that decides nothing
    reason_kind: Optional[str]     # vocabulary reason kind; None with a None status
    channel: str = RAISED          # RAISED, WARNED or PRINTED
    sources: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()   # (PyTorch source path, tags seen at)
    reports: Tuple[str, ...] = ()  # public reports the text was copied from
    op: Optional[str] = None       # "aten::{op}" to qualify a bare op group, or the op itself
    dtype: Optional[str] = None    # the dtype the text implies without naming it
    min_macos: Optional[str] = None  # the macOS the text implies without naming it

    @property
    def fields(self):
        """The fields this family extracts from its text (the pattern's named groups)."""
        return tuple(self.pattern.groupindex)

    @property
    def tags(self):
        return tuple(t for _, tags in self.sources for t in tags)


class Verdict(NamedTuple):
    status: Optional[str]
    reason_kind: Optional[str]
    op: Optional[str]
    dtype: Optional[str]
    min_macos: Optional[str]
    family: Optional[str]


# --- normalising the fields ------------------------------------------------------------------

_MACOS = re.compile(r"mac\s*os(?:[\s_]*ver)?[\s_]*(\d{2})(?:[._](\d+))?", re.IGNORECASE)
_BARE_VERSION = re.compile(r"\s*(\d{2})(?:[._](\d+))?\s*\+?\s*")


def normalise_macos(text):
    """'MacOS_13_2' -> '13.2', 'macOS 14' -> '14.0', 'MacOS14+' -> '14.0', 'MACOS_VER_13_3_PLUS' -> '13.3'."""
    if not text:
        return None
    m = _MACOS.search(text) or _BARE_VERSION.fullmatch(text)
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2) or 0)}"


# ATen's ScalarType names, C++ spellings and torch's short names, to torch's dtype names.
_DTYPES = {
    "double": "float64", "float64": "float64", "torch.float64": "float64", "torch.double": "float64",
    "float": "float32", "float32": "float32", "fp32": "float32",
    "half": "float16", "float16": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "long": "int64", "int64": "int64", "torch.long": "int64", "torch.int64": "int64",
    "int": "int32", "int32": "int32", "short": "int16", "int16": "int16",
    "char": "int8", "int8": "int8", "byte": "uint8", "uint8": "uint8", "bool": "bool",
    "complexhalf": "complex32", "complexfloat": "complex64", "cfloat": "complex64",
    "torch.cfloat": "complex64", "complexdouble": "complex128", "complex": "complex",
}


def normalise_dtype(text):
    """torch's dtype name for a dtype as a message spells it ('Long' -> 'int64'); None if unknown."""
    if not text:
        return None
    key = text.strip().strip("'\"").lower()
    if key in _DTYPES:
        return _DTYPES[key]
    if key.startswith(("uint", "float8")):
        return key
    return None


_KERNEL_SUFFIXES = ("_out_mps", "_mps_out", "_mps_", "_mps", "_out")


def _qualify(raw, template):
    """The op as 'namespace::name[.overload]'; bare kernel names lose their '_mps'/'_out' suffix."""
    raw = raw.strip("'\"` ")
    if "::" in raw:
        return raw
    if raw.startswith("mps_"):
        raw = raw[len("mps_"):]
    for suffix in _KERNEL_SUFFIXES:
        if raw.endswith(suffix) and len(raw) > len(suffix):
            raw = raw[: -len(suffix)]
            break
    return (template or "aten::{op}").format(op=raw)


def _verdict(family, match):
    groups = match.groupdict()
    op = groups.get("op")
    if op:
        op = _qualify(op, family.op)
    elif family.op and "{" not in family.op:
        op = family.op
    dtype = normalise_dtype(groups.get("dtype")) or family.dtype
    min_macos = normalise_macos(groups.get("min_macos")) or family.min_macos
    return Verdict(family.status, family.reason_kind, op, dtype, min_macos, family.name)


# --- building blocks of the patterns ---------------------------------------------------------

OP = r"(?P<op>[A-Za-z_]\w*::[\w.]+)"           # an operator in any namespace: aten::nonzero, torchvision::nms
BARE_OP = r"(?P<op>[A-Za-z_][\w]*)"
DTYPE_WORD = (r"(?P<dtype>Bool|Byte|Char|Short|Int|Long|Half|BFloat16|Float|Double|ComplexHalf|"
              r"ComplexFloat|ComplexDouble|UInt\d+|Float8\w*|QInt8|QUInt8|QInt32)")
FALLING_BACK = r"Falling back on CPU\. This may have perform(?:ance|ace) implications\."


def _re(text, flags=0):
    return re.compile(text, flags)


def _family(name, title, pattern, status, reason_kind, *, channel=RAISED, sources=(), reports=(),
            op=None, dtype=None, min_macos=None):
    return MessageFamily(name, title, _re(pattern) if isinstance(pattern, str) else pattern,
                         status, reason_kind, channel, tuple(sources), tuple(reports), op, dtype, min_macos)


def _src(path, *tags):
    return (path, tuple(tags))


def _since(tag):
    """The tags checked from `tag` to the newest."""
    return ALL_TAGS[ALL_TAGS.index(tag):]


T_ALL = ALL_TAGS
FALLBACK_MM = "aten/src/ATen/mps/MPSFallback.mm"
EMPTY = "aten/src/ATen/mps/EmptyTensor.cpp"
UTILS = "aten/src/ATen/native/mps/OperationUtils.mm"
UTILS_H = "aten/src/ATen/native/mps/OperationUtils.h"

# --- the catalogue -----------------------------------------------------------------------------
# Order matters: the first family whose pattern matches decides. Specific MPS texts come first,
# then the generic patterns kept from classify.py for other backends.

_NO_KERNEL = (
    _family("not_implemented_1_12", "No MPS kernel (torch 1.12 wording, 'not current implemented')",
            r"The operator '" + OP + r"' is not current implemented for the MPS device",
            UNSUPPORTED, "no_kernel", sources=[_src(FALLBACK_MM, "v1.12.0")],
            reports=["https://github.com/pytorch/pytorch/issues/82034"]),
    _family("not_implemented_77764", "No MPS kernel (pointing at issue 77764)",
            r"The operator '" + OP + r"' is not currently implemented for the MPS device\. "
            r"If you want this op to be added in priority during the prototype phase",
            UNSUPPORTED, "no_kernel", sources=[_src(FALLBACK_MM, "v1.13.0", "v2.0.0", "v2.3.0")],
            reports=["https://github.com/pytorch/pytorch/issues/77754"]),
    _family("not_implemented_141287", "No MPS kernel (pointing at issue 141287, with the commit hash)",
            r"The operator '" + OP + r"' is not currently implemented for the MPS device\. "
            r"If you want this op to be considered for addition",
            UNSUPPORTED, "no_kernel", sources=[_src(FALLBACK_MM, *_since("v2.6.0"))]),
    # A later wording not yet seen: any "is not currently implemented for the MPS device".
    _family("not_implemented_mps", "No MPS kernel (any other wording of the MPS error fallback)",
            r"The operator '?" + OP + r"'? is not (?:currently |current )?implemented for the MPS device",
            UNSUPPORTED, "no_kernel", sources=[_src(FALLBACK_MM, *T_ALL)]),
    # Raised in every version: torch 1.12-2.0 said "don't support falling back to run on the CPU, since",
    # 2.3 on "don't support since" (2.3 on also warns with the older words: see view_op_copied_to_cpu).
    _family("view_op_no_fallback", "A view op with no MPS kernel cannot fall back to the CPU",
            r"The operator " + OP + r" appears to be a view operator, but it has no implementation "
            r"for the backend \"(?:mps|MPS)[^\"]*\"\. View operators don't support "
            r"(?:falling back to run on the CPU, )?since",
            UNSUPPORTED, "no_kernel", sources=[_src("aten/src/ATen/native/CPUFallback.cpp", *T_ALL)]),
    _family("dispatchstub_missing_mps", "A DispatchStub has no MPS kernel registered",
            r"DispatchStub: missing MPS kernel", UNSUPPORTED, "no_kernel",
            sources=[_src("aten/src/ATen/native/DispatchStub.cpp", "v1.13.0", "v2.0.0", "v2.3.0")]),
    _family("extension_no_mps_impl", "An extension op has no MPS implementation (mmcv's wording)",
            r"(?P<op>\w+): implementation for device mps(?::\d+)? not found", UNSUPPORTED, "no_kernel",
            reports=["https://github.com/open-mmlab/mmdetection/issues/11437"], op="mmcv::{op}"),
)

_MACOS_GATES = (
    _family("mps_needs_macos_12_3", "The MPS backend needs macOS 12.3 (torch 1.12 to 2.3)",
            r"The MPS backend is supported on MacOS (?P<min_macos>12\.3)\+", UNSUPPORTED, "macos_version",
            sources=[_src(EMPTY, "v1.12.0", "v1.13.0", "v2.0.0", "v2.3.0")]),
    _family("mps_needs_macos_13_or_14", "The MPS backend needs macOS 13 (torch 2.6) or 14 (torch 2.9 on)",
            r"The MPS backend is supported on (?P<min_macos>[Mm]ac[Oo][Ss] 1[3-9]\.\d)\+", UNSUPPORTED, "macos_version",
            sources=[_src(EMPTY, *_since("v2.6.0"))]),
    _family("bfloat16_needs_macos_14", "bfloat16 tensors need macOS 14 (empty_mps)",
            r"MPS BFloat16 is only supported on (?P<min_macos>MacOS 14) or newer", UNSUPPORTED, "macos_version",
            sources=[_src(EMPTY, "v2.3.0", "v2.6.0")], dtype="bfloat16"),
    _family("bfloat16_type_needs_macos_14", "The bfloat16 type needs macOS 14 (getMPSDataType)",
            r"MPS bfloat16 type is supported on (?P<min_macos>MacOS 14\.0) or newer", UNSUPPORTED, "macos_version",
            sources=[_src(UTILS, "v2.3.0", "v2.6.0")], dtype="bfloat16"),
    _family("complex_needs_macos_14", "Complex types need macOS 14 (checkSupportsComplex)",
            r"MPS complex types are only supported on (?P<min_macos>MacOS 14\.0) or newer", UNSUPPORTED,
            "macos_version", sources=[_src(UTILS, "v2.3.0", "v2.6.0")], dtype="complex"),
    _family("complex_starting_macos_14", "Complex types are supported starting from macOS 14",
            r"Complex types are supported starting from (?P<min_macos>MacOS 14\.0)\+", UNSUPPORTED,
            "macos_version", sources=[_src(MPS_FOLDER, "v2.3.0", "v2.6.0")], dtype="complex"),
    _family("complex_conj_needs_macos_14", "Conjugating a complex tensor needs macOS 14",
            r"MPS complex tensors conjugation needs (?P<min_macos>MacOS14)\+", UNSUPPORTED, "macos_version",
            sources=[_src(MPS_FOLDER, "v2.3.0", "v2.6.0")], dtype="complex", op="aten::conj"),
    _family("fft_needs_macos_14", "FFT ops need macOS 14",
            r"FFT operations are only supported on (?P<min_macos>MacOS 14)\+", UNSUPPORTED, "macos_version",
            sources=[_src(OPS + "FastFourierTransform.mm", "v2.3.0", "v2.6.0")]),
    _family("conv3d_needs_macos_13_2", "3-D convolution needs macOS 13.2",
            r"Conv3D is only supported on MPS for (?P<min_macos>MacOS_13_2) or newer", UNSUPPORTED, "macos_version",
            sources=[_src(OPS + "Convolution.mm", "v2.3.0", "v2.6.0")]),
    _family("floating_only_before_macos_14", "An op takes only floating types before macOS 14 (isin)",
            r"(?P<op>[a-z]\w*?)(?:_Tensor_Tensor_out|_out)? only works on floating types on MPS for pre "
            r"(?P<min_macos>MacOS_\d+_\d+)(?:\. Received dtype: " + DTYPE_WORD + r")?",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "TensorCompare.mm", "v2.6.0")]),
    _family("int64_needs_macos_13", "An op with int64 input needs macOS 13 (pooling)",
            r"MPS: " + BARE_OP + r" op with int64 input is supported natively starting from "
            r"(?P<min_macos>macOS 13\.0)\.(?! Falling back)", UNSUPPORTED, "macos_version",
            sources=[_src(OPS + "Pooling.mm", "v2.0.0", "v2.3.0")], dtype="int64"),
    _family("pow_int64_needs_macos_13_2", "pow with int64 input needs macOS 13.2",
            r"MPS: power op with int64 input is supported natively starting from (?P<min_macos>macOS 13\.2)",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "BinaryOps.mm", "v2.0.0", "v2.3.0", "v2.6.0")],
            op="aten::pow", dtype="int64"),
    _family("uint8_needs_macos_13", "A unary or binary op with uint8 needs macOS 13",
            r"MPS support (?:unary|binary) op with uint8 natively starting from (?P<min_macos>macOS 13\.0)",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "UnaryOps.mm", "v2.0.0", "v2.3.0"),
                                                   _src(OPS + "BinaryOps.mm", "v2.0.0", "v2.3.0")], dtype="uint8"),
    _family("multilayer_lstm_needs_macos_13", "A multi-layer LSTM needs macOS 13 (torch 2.0)",
            r"^Multi-layer LSTM support in MPS available only on (?P<min_macos>MacOS 13) onwards",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "RnnOps.mm", "v2.0.0")], op="aten::lstm"),
    _family("bmm_tiling_needs_macos_15", "Batch matmul over 2**32 entries needs macOS 15",
            r"Tiling of batch matmul for larger than 2\*\*32 entries only available from "
            r"(?P<min_macos>MacOS15) onwards",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "LinearAlgebra.mm", *_since("v2.6.0"))],
            op="aten::bmm"),
    _family("scatter_reduce_int64_needs_macos_15", "scatter_reduce amin/amax on int64 needs macOS 15",
            r"(?P<op>scatter_reduce)\(amin/amax\) on int64 requires (?P<min_macos>macOS 15) or newer",
            UNSUPPORTED, "macos_version", sources=[_src(OPS + "ScatterGather.mm", "v2.13.0", "v2.14.1")],
            dtype="int64"),
)

_KERNEL_FALLBACKS = (
    _family("generic_cpu_fallback", "PyTorch's generic MPS fallback ran the op on the CPU",
            r"The operator '" + OP + r"' is not currently supported on the MPS backend and will fall back "
            r"to run on the CPU", FALLBACK, "cpu_fallback", channel=WARNED, sources=[_src(FALLBACK_MM, *T_ALL)],
            reports=["https://github.com/pytorch/pytorch/issues/77764"]),
    _family("view_op_copied_to_cpu", "A view op ran through the CPU fallback as a copy",
            r"The operator " + OP + r" appears to be a view operator, but it has no implementation for the "
            r"backend \"[^\"]*\"\. View operators don't support falling back to run on the CPU",
            FALLBACK, "cpu_fallback", channel=WARNED,
            sources=[_src("aten/src/ATen/native/CPUFallback.cpp", *_since("v2.3.0"))]),
    _family("nonzero_native_from_macos", "nonzero falls back below macOS 13 (torch 2.0-2.3) or 14 (2.6)",
            r"MPS: (?P<op>nonzero) op is supported natively starting from (?P<min_macos>macOS 1[34]\.0)\. "
            + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "Indexing.mm", "v2.0.0", "v2.3.0", "v2.6.0")]),
    _family("nonzero_input_macos_14", "nonzero falls back for large or complex inputs before macOS 15",
            r"MPS: (?P<op>nonzero) op is not natively supported for the provided input on MacOS14",
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "Indexing.mm", "v2.6.0", "v2.9.0")],
            min_macos="15.0"),  # the gate is macOS 15 (large or complex inputs), whatever the text says
    _family("median_native_from_macos_13", "median falls back below macOS 13",
            r"MPS: (?P<op>median) op is supported natively starting from (?P<min_macos>macOS 13\.0)\. " + FALLING_BACK,
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "ReduceOps.mm", "v2.0.0", "v2.3.0")]),
    _family("grid_sampler_native_from_macos", "grid_sampler_2d falls back below macOS 13.1 (2.0) or 13.2 (2.3-2.6)",
            r"MPS: (?P<op>grid_sampler_2d) op is supported natively starting from (?P<min_macos>macOS 13\.[12])\. "
            + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "GridSampler.mm", "v2.0.0", "v2.3.0", "v2.6.0")]),
    _family("pixel_shuffle_from_macos_13", "pixel_shuffle and pixel_unshuffle fall back below macOS 13",
            r"MPS: (?P<op>pixel_(?:un)?shuffle) op is supported starting from (?P<min_macos>macOS 13\.0)\. "
            + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "PixelShuffle.mm", "v2.3.0")]),
    _family("unique_native_from_macos_13", "unique ops fall back below macOS 13",
            r"MPS: (?P<op>_unique2|unique_consecutive|unique_dim_consecutive) op is supported natively starting "
            r"from (?P<min_macos>macOS 13\.0)\. " + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "Unique.mm", "v2.0.0", "v2.3.0")]),
    _family("randperm_native_from_macos_13", "randperm falls back below macOS 13",
            r"MPS: (?P<op>randperm) op is supported natively starting from (?P<min_macos>macOS 13\.0)\. "
            + FALLING_BACK,
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "RangeFactories.mm", "v2.0.0", "v2.3.0")]),
    _family("upsample_scale_from_macos_13", "upsampling with a scale factor falls back below macOS 13",
            r"MPS: passing scale factor to upsample ops is supported natively starting from "
            r"(?P<min_macos>macOS 13\.0)\. " + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "UpSample.mm", "v2.0.0", "v2.3.0")]),
    _family("upsample_nearest_from_macos_13", "nearest upsampling falls back below macOS 13",
            r"MPS: '(?P<mode>nearest(?:-exact)?)' mode upsampling is supported natively starting from "
            r"(?P<min_macos>macOS 13\.0)\. " + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "UpSample.mm", "v2.0.0", "v2.3.0")]),
    _family("avg_pool_divisor_int64", "Average pooling with a divisor on int64 falls back to the CPU",
            r"MPS: passing divisor to Average Pooling op with int64 input is not supported on MPS backend\. "
            + FALLING_BACK, FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "Pooling.mm", *_since("v2.0.0"))],
            op="aten::avg_pool2d", dtype="int64"),
    _family("inverse_from_macos_13", "linalg_inv_ex falls back below macOS 13.3",
            r"torch\.(?P<op>linalg_inv_ex)(?:\.inverse)? is supported by MPS on MacOS 13\+, "
            r"please upgrade\. Falling back to CPU", FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "Inverse.mm", "v2.0.0", "v2.3.0", "v2.6.0")],
            min_macos="13.3"),  # the gate is MACOS_VER_13_3_PLUS, whatever the text says
    _family("cumulative_from_macos_13", "cumsum (and other cumulative ops) fall back below macOS 13",
            r"(?:^|\btorch\.)(?P<op>\w+) supported by MPS on (?P<min_macos>MacOS 13)\+, please upgrade",
            FALLBACK, "kernel_fallback", channel=WARNED,
            sources=[_src(OPS + "UnaryOps.mm", "v2.0.0", "v2.3.0", "v2.6.0")]),
    _family("topk_k16_from_macos_13", "topk with k > 16 falls back below macOS 13",
            r"torch\.(?P<op>topk) support for k>16 by MPS on (?P<min_macos>MacOS 13)\+, please upgrade",
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "Shape.mm", "v2.0.0", "v2.3.0")]),
    _family("sort_from_macos_13", "sort falls back below macOS 13",
            r"torch\.(?P<op>sort) is supported by MPS on (?P<min_macos>MacOS 13)\+, please upgrade\. "
            r"Falling back to CPU",
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "Sort.mm", "v2.0.0", "v2.3.0")]),
    _family("linalg_qr_size_fallback", "linalg_qr falls back to the CPU above min(m, n) = 512",
            r"(?P<op>linalg_qr): MPS implementation is currently limited to min\(m,n\) <= \d+, falling back to CPU",
            FALLBACK, "kernel_fallback", channel=WARNED, sources=[_src(OPS + "LinearAlgebra.mm", "v2.13.0")]),
    # Notices: warnings that say something about the kernel but not that work ran on the CPU.
    _family("multilayer_lstm_cell_notice",
            "A multi-layer LSTM runs as LSTMCell steps before macOS 13 (not a CPU fallback)",
            r"Native multi-layer LSTM support in MPS available only on (?P<min_macos>MacOS 13) onwards\. "
            r"Falling back to LSTMCell iteration", None, None, channel=WARNED,
            sources=[_src("aten/src/ATen/native/RNN.cpp", "v2.3.0")], op="aten::lstm"),
    _family("int64_downcast_notice", "int64 computed in a smaller type before macOS 13.3 (not a CPU fallback)",
            r"MPS: no support for int64 for (?P<op>\w+), downcasting to a smaller data type \(int32/float32\)\. "
            r"Native support for int64 has been added in (?P<min_macos>macOS 13\.3)",
            None, None, channel=WARNED, sources=[_src(UTILS_H, "v2.3.0", "v2.6.0")], dtype="int64",
            reports=["https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0/discussions/15"]),
    _family("int64_cast_int32_notice", "int64 cast to int32 (torch 2.0-2.6, not a CPU fallback)",
            r"MPS: no support for int64 (?P<what>reduction ops|min/max ops|repeats mask), casting it to int32",
            None, None, channel=WARNED, sources=[_src(MPS_FOLDER, "v2.0.0", "v2.3.0", "v2.6.0")], dtype="int64"),
    _family("mm_metal_dispatch_notice", "matmul dispatched to a Metal kernel instead of MPSGraph (not a CPU fallback)",
            r"MPS mm implementation has a known issue with this shape, dtype and slice\. Dispatching to metal "
            r"implementation instead", None, None, channel=WARNED,
            sources=[_src(OPS + "LinearAlgebra.mm", "v2.13.0", "v2.14.1")], op="aten::mm"),
)

_DTYPES_REFUSED = (
    _family("float64_from_mps", "float64 is refused when a tensor is made on or moved to MPS",
            r"Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64",
            UNSUPPORTED, "dtype", sources=[_src(EMPTY, *T_ALL)], dtype="float64"),
    _family("float64_to_mps", "float64 is refused when a tensor is copied to MPS",
            r"Cannot convert a float64 Tensor to MPS as the MPS framework doesn't support float64",
            UNSUPPORTED, "dtype", sources=[_src(MPS_FOLDER, *T_ALL)], dtype="float64"),
    # EmptyTensor.cpp before bfloat16 came to MPS (pytorch#119641, torch 2.3, macOS 14): refused on any
    # macOS, and still the text of the last Intel-Mac wheels (torch 2.2).
    _family("bfloat16_not_supported", "bfloat16 is refused on any macOS (torch 2.0 to 2.2)",
            r"BFloat16 is not supported on MPS", UNSUPPORTED, "dtype", dtype="bfloat16",
            reports=["https://github.com/pytorch/pytorch/issues/141864",
                     "https://github.com/pytorch/pytorch/issues/78168"]),
    _family("float64_not_supported", "float64 is not supported on MPS (short wording)",
            r"float64 is not supported on MPS", UNSUPPORTED, "dtype",
            sources=[_src(MPS_FOLDER, *_since("v2.0.0"))], dtype="float64"),
    _family("dtype_not_convertible", "A dtype MPS has no type for (getMPSDataType)",
            r"Trying to convert " + DTYPE_WORD + r" to the MPS backend but it does not have support for that dtype",
            UNSUPPORTED, "dtype", sources=[_src(UTILS, *T_ALL)],
            reports=["https://github.com/pytorch/pytorch/issues/78503"]),
    _family("convolution_floating_only", "Convolution takes only floating types",
            r"Convolution is supported only for Floating types", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Convolution.mm", *_since("v2.0.0"))],
            op="aten::convolution"),
    _family("int64_input_refused", "An op refuses int64 input (torch 2.0-2.6)",
            r"MPS does not support (?P<op>[\w/]+) ops? with int64 input", UNSUPPORTED, "dtype",
            sources=[_src(MPS_FOLDER, "v2.0.0", "v2.3.0", "v2.6.0")], dtype="int64"),
    _family("dot_int64_refused", "dot refuses int64 input",
            r"MPS: (?P<op>dot) op doesn't support int64 input", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Blas.mm", "v2.0.0", "v2.3.0", "v2.6.0")], dtype="int64"),
    _family("scalar_type_refused", "An op refuses a scalar type (digamma, lgamma, polygamma on Double)",
            r"MPS does not support (?P<op>\w+) op with scalar type: " + DTYPE_WORD, UNSUPPORTED, "dtype",
            sources=[_src(OPS + "UnaryOps.mm", "v2.3.0", "v2.6.0", "v2.9.0")]),
    _family("non_float_refused", "An op refuses non-float inputs, weights or bias (linear, addr, addbmm)",
            r"MPS device does not support (?P<op>\w+)(?: backward)? (?:for|or baddbmm for) "
            r"(?:non-float|this input type)",
            UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Linear.mm", *_since("v1.13.0"))]),
    _family("not_implemented_non_floating", "A kernel is not implemented for non-floating types",
            BARE_OP + r" not implemented for non-floating types", UNSUPPORTED, "dtype",
            sources=[_src(MPS_FOLDER, *_since("v2.3.0"))]),
    _family("only_floating_implemented", "A kernel is only implemented for floating types",
            BARE_OP + r" is only implemented for floating types", UNSUPPORTED, "dtype",
            sources=[_src(MPS_FOLDER, *_since("v2.0.0"))]),
    _family("complex_not_supported_for_mps", "An op refuses complex (or bool) input",
            r"(?:\b(?P<op>[a-z_]+)|[A-Z][\w ]*?) for (?P<dtype>complex|bool) is not supported for MPS",
            UNSUPPORTED, "dtype",
            sources=[_src(MPS_FOLDER, "v2.13.0", "v2.14.1")]),
    _family("complex_yet_not_supported", "An indexing op does not support complex yet",
            r"(?P<op>gather|scatter|index_select|index_fill_)\(\): (?:Yet not supported for complex|"
            r"Complex types are yet not supported)", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "ScatterGather.mm", "v2.3.0", "v2.6.0", "v2.9.0")], dtype="complex"),
    _family("linear_backward_weights_dtype", "linear backward refuses the weights' dtype",
            r"mps_linear_backward: unsupported weights data type: " + DTYPE_WORD, UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Linear.mm", *_since("v2.0.0"))],
            op="aten::linear_backward"),
    _family("index_reduce_dtype", "index_reduce refuses a dtype",
            r"(?P<op>index_reduce) for MPS does not support (?P<dtype>torch\.\w+) dtype", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Indexing.mm", "v2.13.0", "v2.14.1")]),
    _family("sdpa_dtype", "scaled_dot_product_attention refuses a dtype",
            r"(?P<op>scaled_dot_product_attention) for MPS does not support dtype (?P<dtype>\w+)",
            UNSUPPORTED, "dtype", sources=[_src(OPS + "Attention.mm", "v2.13.0", "v2.14.1")]),
    _family("convtranspose3d_half", "3-D transposed convolution refuses bfloat16 and float16",
            r"ConvTranspose 3D with BF16 or FP16 types is not supported on MPS", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Convolution.mm", *_since("v2.9.0"))], op="aten::convolution"),
    _family("long_batch_norm", "batch norm refuses int64",
            r"Long batch norm is not supported with MPS", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "Normalization.mm", "v2.13.0")], op="aten::native_batch_norm", dtype="int64"),
    _family("histogram_float32_only", "histogram takes only float32",
            r"(?P<op>histogram) is only supported for float32", UNSUPPORTED, "dtype",
            sources=[_src(OPS + "HistogramKernel.mm", "v2.13.0", "v2.14.1")]),
    _family("lu_factor_complex", "lu_factor refuses complex (and non-float) types",
            r"linalg\.(?P<op>lu_factor)\(\): MPS (?:doesn't support complex types|only supports floats)",
            UNSUPPORTED, "dtype", sources=[_src(OPS + "LinearAlgebra.mm", *_since("v2.6.0"))],
            op="aten::linalg_{op}"),
)

_SIZE_LIMITS = (
    _family("rank_over_16", "Tensors of more than 16 dimensions",
            r"MPS supports tensors with dimensions <= 16, but got \d+", UNSUPPORTED, "size_limit",
            sources=[_src(EMPTY, *_since("v2.3.0"))]),
    _family("output_channels_65536", "Convolution with more than 65536 output channels",
            r"Output channels > 65536 not supported at the MPS device", UNSUPPORTED, "size_limit",
            sources=[_src(OPS + "Convolution.mm", *_since("v2.6.0"))], op="aten::convolution"),
    _family("matmul_output_2_32", "matmul output over 2**32 elements",
            r"Output dim sizes larger than 2\*\*32 elements for matmul not supported on MPS device",
            UNSUPPORTED, "size_limit",
            sources=[_src(OPS + "LinearAlgebra.mm", *_since("v2.6.0"))], op="aten::mm"),
    _family("masked_fill_2_32", "masked_fill over 2**32 elements",
            r"(?P<op>masked_fill) not supported for tensors of more than 2\*\*32 elements", UNSUPPORTED, "size_limit",
            sources=[_src(OPS + "Indexing.mm", *_since("v2.9.0"))]),
    _family("mpsgraph_int_max_dims", "A dimension larger than INT_MAX for MPSGraph",
            r"MPSGa?r?a?ph does not support tensor dims larger than INT_MAX", UNSUPPORTED, "size_limit",
            sources=[_src(UTILS, *_since("v2.9.0"))]),
    _family("nonzero_int_max", "nonzero over INT_MAX elements",
            r"(?P<op>nonzero) is not supported for tensors? with more than (?:INT_MAX|\d+) elements", UNSUPPORTED,
            "size_limit", sources=[_src(OPS + "Indexing.mm", "v2.0.0", "v2.3.0", "v2.6.0", "v2.9.0", "v2.13.0")]),
    _family("indexing_16_indices", "More than 16 index tensors in one indexing kernel",
            r"Current limit allows up to 16 indices to be used in MPS indexing kernels", UNSUPPORTED, "size_limit",
            sources=[_src(OPS + "Indexing.mm", *_since("v1.13.0"))],
            op="aten::index"),
    _family("unfold_backward_16_dims", "unfold backward above 16 dimensions",
            r"(?P<op>unfold_backward)_mps :Only up to 16-dim tensors supported", UNSUPPORTED, "size_limit",
            sources=[_src(MPS_FOLDER, *_since("v2.6.0"))]),
    _family("invalid_buffer_size", "A single buffer larger than the device allows",
            r"Invalid buffer size: [\d.]+ [KMGT]?i?B", UNSUPPORTED, "size_limit",
            sources=[_src("aten/src/ATen/mps/MPSAllocator.mm", *T_ALL)]),
)

_ARGUMENTS = (
    _family("adaptive_pool_divisible", "Adaptive pooling with sizes that do not divide (torch 2.0 on)",
            r"Adaptive pool MPS: (?:input|output) sizes must be divisible by (?:output|input) sizes", UNSUPPORTED,
            "argument", sources=[_src(OPS + "AdaptivePooling.mm", *_since("v2.0.0"))],
            op="aten::adaptive_avg_pool2d"),
    _family("adaptive_pool_multiples", "Adaptive pooling to a larger output that is not a multiple (torch 1.13)",
            r"Adaptive pool MPS: If output is larger than input, output sizes must be multiples of input sizes",
            UNSUPPORTED, "argument", sources=[_src(OPS + "AdaptivePooling.mm", "v1.13.0")],
            op="aten::adaptive_avg_pool2d"),
    _family("adaptive_pool_mixed_sizes", "Adaptive pooling growing one side and shrinking the other",
            r"Adaptive pool MPS: Input height and width must both be greath?er than,? or equal to, or lesser than,? "
            r"output height and width", UNSUPPORTED, "argument",
            sources=[_src(OPS + "AdaptivePooling.mm", *_since("v1.13.0"))],
            op="aten::adaptive_avg_pool2d"),
    _family("grid_sampler_border_padding", "grid_sampler with border padding",
            r"MPS: Unsupported Border padding mode", UNSUPPORTED, "argument",
            sources=[_src(OPS + "GridSampler.mm", "v2.3.0", "v2.6.0", "v2.9.0")], op="aten::grid_sampler_2d"),
    _family("bicubic_interpolation", "Bicubic interpolation (grid_sampler)",
            r"(?:MPS|" + BARE_OP + r"): Unsupported Bicubic interpolation", UNSUPPORTED, "argument",
            sources=[_src(OPS + "GridSampler.mm", *_since("v2.3.0"))],
            op="aten::{op}"),
    _family("grid_sampler_3d_backward_modes", "grid_sampler_3d backward with another interpolation",
            r"(?P<op>grid_sampler_3d) backward on MPS only supports bilinear and nearest interpolation", UNSUPPORTED,
            "argument", sources=[_src(OPS + "GridSampler.mm", "v2.13.0", "v2.14.1")]),
    _family("scatter_reduce_mean", "scatter_reduce in mean mode",
            r"Scatter reduce mean mode not yet supported in MPS", UNSUPPORTED, "argument",
            sources=[_src(OPS + "ScatterGather.mm", "v1.12.0", "v1.13.0", "v2.0.0", "v2.3.0", "v2.6.0", "v2.9.0")],
            op="aten::scatter_reduce"),
    _family("sdpa_dropout", "scaled_dot_product_attention with dropout",
            r"(?P<op>scaled_dot_product_attention) for MPS does not support dropout", UNSUPPORTED, "argument",
            sources=[_src(OPS + "Attention.mm", "v2.13.0", "v2.14.1")]),
    _family("lu_factor_no_pivot", "lu_factor without pivoting",
            r"linalg\.(?P<op>lu_factor)\(\): MPS doesn't allow pivot == False", UNSUPPORTED, "argument",
            sources=[_src(OPS + "LinearAlgebra.mm", *_since("v2.6.0"))], op="aten::linalg_{op}"),
    _family("lstm_projections", "LSTM with projections",
            r"LSTM with projections is not currently supported with MPS", UNSUPPORTED, "argument",
            sources=[_src(OPS + "RnnOps.mm", *_since("v2.0.0"))], op="aten::lstm"),
    _family("topk_k_over_16", "topk with k > 16 (torch 1.13)",
            r"Currently (?P<op>topk) on mps works only for k<=16", UNSUPPORTED, "argument",
            sources=[_src(OPS + "Shape.mm", "v1.13.0")]),
    _family("conv3d_unsupported", "3-D convolution (torch 1.13-2.0), transposed (2.0-2.6)",
            r"(?:Conv|ConvTranspose) ?3D is not supported on MPS", UNSUPPORTED, "argument",
            sources=[_src(OPS + "Convolution.mm", "v1.13.0", "v2.0.0", "v2.3.0", "v2.6.0")], op="aten::convolution"),
)

_MEMORY_AND_DEVICES = (
    _family("mps_out_of_memory", "The MPS allocator ran out of memory (or reached its high watermark)",
            r"MPS backend out of memory \(MPS allocated: [^)]*\)", ERROR, "out_of_memory",
            sources=[_src("aten/src/ATen/mps/MPSAllocator.mm", "v1.13.0", "v2.0.0", "v2.3.0", "v2.6.0", "v2.9.0",
                          "v2.13.0", "v2.14.1")]),
    _family("mps_alloc_failed", "Allocating memory on the MPS device failed",
            r"Failed to allocate memory on MPS device", ERROR, "out_of_memory",
            sources=[_src("aten/src/ATen/mps", *_since("v2.9.0"))]),
    _family("placeholder_storage", "An MPS kernel was handed a tensor that is not on MPS",
            r"Placeholder storage has not been allocated on MPS device", ERROR, "device_placement",
            sources=[_src(UTILS, *T_ALL)]),
    _family("passed_cpu_tensor", "A CPU tensor passed to an MPS op",
            r"Passed CPU tensor to MPS op", ERROR, "device_placement",
            sources=[_src(UTILS, *_since("v2.6.0"))]),
    # Convolution's own check (aten/src/ATen/native/Convolution.cpp), MPS on one side and the CPU on the
    # other; the same words with two MPS types are a dtype mismatch, left to the generic verdicts.
    _family("input_weight_devices", "A convolution's input and weight on MPS and the CPU",
            r"Input type \((?:MPS\w+Type\) and weight type \((?:torch\.\w+Tensor|CPU\w+Type)|"
            r"(?:torch\.\w+Tensor|CPU\w+Type)\) and weight type \(MPS\w+Type)\) should be the same",
            ERROR, "device_placement",
            reports=["https://github.com/pytorch/ignite/issues/2977",
                     "https://github.com/loscrossos/core_framepackstudio/issues/4"]),
    _family("slow_conv2d_devices", "slow_conv2d with input and weight on different devices",
            r"(?P<op>slow_conv2d_forward)_mps: input\(device='[^']*'\) and weight\(device=[^)]*\)\s+must be on the "
            r"same device", ERROR, "device_placement",
            sources=[_src(FALLBACK_MM, *_since("v1.13.0"))],
            op="aten::_{op}"),
)

# The generic patterns of classify.py, kept so this module replaces it for any backend.
_GENERIC = (
    _family("could_not_run", "No kernel for this backend (the dispatcher's message, any backend)",
            r"Could not run '" + OP + r"' with arguments from the '(?P<backend>\w+)' backend",
            UNSUPPORTED, "no_kernel", sources=[_src("aten/src/ATen/core/dispatch/OperatorEntry.cpp", *T_ALL)]),
    _family("kernel_dtype_not_implemented", "A kernel exists, but not for this dtype (AT_DISPATCH)",
            r"\"(?P<kernel>\w+)\" not implemented for '" + DTYPE_WORD + r"'", UNSUPPORTED, "dtype",
            sources=[_src("aten/src/ATen/Dispatch.h", *T_ALL)]),
    _family("cudnn_dtype", "cuDNN refuses a dtype",
            r"getCudnnDataTypeFromScalarType\(\) not supported for " + DTYPE_WORD, UNSUPPORTED, "dtype",
            sources=[_src("aten/src/ATen/cudnn/Descriptors.cpp", *T_ALL)]),
    _family("tensor_type_not_supported", "A legacy tensor type is not supported",
            r"\b" + DTYPE_WORD + r"Tensor is not supported", UNSUPPORTED, "dtype"),
    _family("cuda_out_of_memory", "CUDA ran out of memory",
            r"CUDA out of memory|CUDA error: out of memory", ERROR, "out_of_memory",
            sources=[_src("c10/cuda/CUDACachingAllocator.cpp", *T_ALL)]),
    _family("generic_out_of_memory", "Any other out-of-memory",
            r"\bout of memory\b|OutOfMemoryError|can't allocate memory", ERROR, "out_of_memory"),
    _family("tensors_on_two_devices", "Tensors on two devices in one op",
            r"Expected all tensors to be on the same device", ERROR, "device_placement",
            sources=[_src("aten/src/ATen/native/TensorIterator.cpp", *T_ALL)]),
    _family("argument_wants_cpu", "An argument that must stay on the CPU",
            r"(?i:expected \w+ to be on cpu|must be on (?:the )?cpu)", ERROR, "device_placement"),
    _family("generic_dtype_refusal", "Any other refusal that names a dtype",
            r"(?:not supported|not implemented|unsupported|does not support|doesn't support) for '?" + DTYPE_WORD
            + r"\b|(?i:does not have support for that dtype|unsupported dtype|not supported for (?:dtype|type))",
            UNSUPPORTED, "dtype"),
    _family("generic_mps_refusal", "Any other refusal on MPS",
            r"(?:MPS|mps)\b.*(?:does not support|doesn't support|not supported|unsupported|is not implemented)"
            r"|(?:does not support|doesn't support|not supported|unsupported|not implemented).*\b(?:MPS|mps)\b",
            UNSUPPORTED, "argument"),
)

_CRASHES = (
    _family("uncaught_cpp_exception", "The process died on a C++ exception nobody caught",
            r"libc\+\+abi(?:\.dylib)?: terminating (?:due to|with) uncaught exception of type "
            r"(?P<exception>[\w:]+): (?P<message>.*)", CRASH, "signal", channel=PRINTED,
            reports=["https://github.com/pytorch/pytorch/issues/78503",
                     "https://github.com/pytorch/pytorch/issues/95976"]),
    _family("ndarray_over_2_32_bytes", "MPS refused an NDArray over 2**32 bytes (failed assertion)",
            r"failed assertion `\[MPS\w*NDArray initWithDevice:descriptor:(?:isTextureBacked:)?\] Error: "
            r"total bytes of NDArray > 2\*\*32'", CRASH, "size_limit", channel=PRINTED,
            reports=["https://github.com/pytorch/pytorch/issues/143859",
                     "https://github.com/xinntao/ESRGAN/issues/134"]),
    _family("ndarray_dims_over_2_31", "MPS refused an NDArray whose dimensions multiply past 2**31",
            r"failed assertion `\[MPS\w*NDArray initWithDevice:descriptor:\] Error: "
            r"product of dimension sizes > 2\*\*31'",
            CRASH, "size_limit", channel=PRINTED, reports=["https://github.com/liuliu/swift-diffusion/issues/41"]),
    # MPSGraph's compiler checks the graph a kernel built: an MLIR diagnostic naming the graph node
    # ('loc("mps_add"(...MPSGraphUtilities.mm":228:0)): error: input types ... are not broadcast
    # compatible'), then this line, then abort. crash_evidence keeps the diagnostic with it.
    _family("mpsgraph_compile_error", "MPSGraph could not compile the graph a kernel built (LLVM ERROR, abort)",
            r"LLVM ERROR: (?P<detail>.+)", CRASH, "signal", channel=PRINTED,
            reports=["https://github.com/pytorch/pytorch/issues/78879",
                     "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/2198"]),
    _family("mps_failed_assertion", "An MPS or Metal failed assertion (a bug in a kernel or in MPS)",
            r"failed assertion `(?P<assertion>[^\n]*)", CRASH, "signal", channel=PRINTED,
            reports=["https://github.com/pytorch/pytorch/issues/96153",
                     "https://github.com/pytorch/pytorch/issues/92222"]),
)

# Families whose wording was read in PyTorch's source text, not only found in the release binaries.
READ_IN_SOURCE = (
    "not_implemented_77764", "not_implemented_141287", "generic_cpu_fallback", "view_op_no_fallback",
    "view_op_copied_to_cpu", "slow_conv2d_devices", "rank_over_16", "float64_from_mps", "bfloat16_needs_macos_14",
    "mps_needs_macos_12_3", "bfloat16_type_needs_macos_14", "complex_needs_macos_14", "fft_needs_macos_14",
    "conv3d_needs_macos_13_2", "convolution_floating_only", "int64_needs_macos_13",
    "nonzero_native_from_macos", "median_native_from_macos_13", "grid_sampler_native_from_macos",
    "unique_native_from_macos_13", "randperm_native_from_macos_13", "upsample_scale_from_macos_13",
    "upsample_nearest_from_macos_13", "avg_pool_divisor_int64", "int64_downcast_notice", "mps_out_of_memory",
    "uint8_needs_macos_13", "pow_int64_needs_macos_13_2", "multilayer_lstm_needs_macos_13",
    "multilayer_lstm_cell_notice", "cumulative_from_macos_13", "topk_k16_from_macos_13", "sort_from_macos_13",
    "inverse_from_macos_13", "nonzero_input_macos_14",
)

MESSAGE_FAMILIES = (_NO_KERNEL + _MACOS_GATES + _KERNEL_FALLBACKS + _DTYPES_REFUSED + _SIZE_LIMITS
                    + _ARGUMENTS + _MEMORY_AND_DEVICES + _GENERIC + _CRASHES)

FAMILY = {f.name: f for f in MESSAGE_FAMILIES}

# The verdict when nothing in the catalogue matches.
NOT_IMPLEMENTED = Verdict(UNSUPPORTED, "no_kernel", None, None, None, None)
BUG = Verdict(ERROR, "bug", None, None, None, None)
# Python's own out-of-memory (bytearray(8 TiB), numpy's ArrayMemoryError): its text may say nothing.
OUT_OF_MEMORY = Verdict(ERROR, "out_of_memory", None, None, None, "generic_out_of_memory")


def _check_catalogue():
    names = [f.name for f in MESSAGE_FAMILIES]
    assert len(names) == len(set(names)), "duplicate family names"
    for f in MESSAGE_FAMILIES:
        assert f.channel in CHANNELS, f.name
        assert f.status is None or f.status in STATUSES, f.name
        assert f.reason_kind is None or f.reason_kind in REASON_KINDS, f.name
        assert (f.status is None) == (f.reason_kind is None), f.name
        assert f.status is None or f.status in REASON_KIND[f.reason_kind].statuses, f.name
        for _, tags in f.sources:
            assert set(tags) <= set(ALL_TAGS), f.name
    assert set(READ_IN_SOURCE) <= set(names)


_check_catalogue()


# --- reading exceptions --------------------------------------------------------------------------

def _families(channel):
    return [f for f in MESSAGE_FAMILIES if f.channel == channel]


_ERROR_FAMILIES = _families(RAISED)
_WARNING_FAMILIES = _families(WARNED)
_CRASH_FAMILIES = _families(PRINTED)


def _is_a(exc_type, base, names):
    """Whether `exc_type` (a type, an instance, or a name in `names`) is `base` or a subclass of it."""
    if exc_type is None:
        return False
    if isinstance(exc_type, str):
        return re.split(r"[.:]+", exc_type)[-1] in names
    if isinstance(exc_type, BaseException):
        exc_type = type(exc_type)
    return isinstance(exc_type, type) and issubclass(exc_type, base)


def _is_not_implemented(exc_type):
    return _is_a(exc_type, NotImplementedError, {"NotImplementedError"})


# By name too: a dead worker's stderr or a recorded error_type names its class.
_MEMORY_ERRORS = {"MemoryError", "_ArrayMemoryError", "OutOfMemoryError"}


def match_family(text, families=None):
    """(family, match) of the first family in `families` (all of them by default) that `text` matches."""
    text = str(text or "")
    for family in MESSAGE_FAMILIES if families is None else families:
        m = family.pattern.search(text)
        if m:
            return family, m
    return None, None


def classify_message(text, *, exc_type=None):
    """The Verdict for an exception's text, or None if neither the text nor `exc_type` says anything.

    A known message gives its family's verdict. Otherwise a NotImplementedError
    (a type, an instance or its name) is `unsupported`/`no_kernel`, a MemoryError
    (or a subclass) `error`/`out_of_memory`, any other exception is `error`/`bug`, and a text with no exception type is None.
    """
    family, m = match_family(text, _ERROR_FAMILIES)
    if family is not None:
        return _verdict(family, m)
    if _is_not_implemented(exc_type):
        return NOT_IMPLEMENTED
    if _is_a(exc_type, MemoryError, _MEMORY_ERRORS):
        return OUT_OF_MEMORY
    if exc_type is not None:
        return BUG
    return None


def describe(verdict):
    """One line for a report: the family's title, with what the text named."""
    if verdict is None:
        return ""
    if verdict.family is None:
        return "NotImplementedError" if verdict.reason_kind == "no_kernel" else "raised on the target only"
    parts = [FAMILY[verdict.family].title]
    if verdict.dtype:
        parts.append(f"dtype {verdict.dtype}")
    if verdict.min_macos:
        parts.append(f"needs macOS {verdict.min_macos}")
    return "; ".join(parts)


def classify_error(exc):
    """(status, op, reason) for an exception the target raised: the shape of classify.classify_error."""
    verdict = classify_message(str(exc), exc_type=type(exc))
    reason = describe(verdict)
    if verdict.family is None and verdict.status == ERROR:
        reason = f"{type(exc).__name__} on the target only"
    return verdict.status, verdict.op, reason


# --- reading warnings ---------------------------------------------------------------------------

# Fallback by meaning: the warning says work runs (or ran) on the CPU.
_CPU = r"(?:the )?(?:CPU|cpu|host)\b"
_SAYS_CPU = re.compile(
    r"fall(?:s|ing|en)?[ -]?back (?:on|to)(?: run(?:ning)? on)? " + _CPU
    + r"|(?:runs?|running|ran|executed?|executing|computed?|computing|performed|done|moved|copied|offloaded)"
      r"(?: \w+){0,3} (?:on|to) " + _CPU
    + r"|\bCPU fallback\b|\bfallback to (?:the )?CPU\b", re.IGNORECASE)
_DENIES = re.compile(
    r"(?:can ?not|cannot|can't|don't|doesn't|does not|do not|won't|will not|never|without|not)"
    r"(?: support)?(?: \w+)? fall(?:ing)?[ -]?back"
    r"|\bno (?:CPU )?fallback\b|profil", re.IGNORECASE)
_NAMES_OP = (
    re.compile(r"'" + OP + r"'"),
    re.compile(r"\b" + OP),
    re.compile(r"(?:^|: )MPS: (?P<op>[a-z_]\w*) op\b"),
    re.compile(r"torch\.(?P<op>[a-z_]\w*)"),
    re.compile(r"^(?P<op>[a-z_]\w*?)(?:_mps)?: ", re.MULTILINE),
)


def read_warning(text):
    """The Verdict for a warning's text when a catalogue family knows it; None otherwise.

    Notices (int64 downcast, the Metal matmul path) have a None status: known,
    but not a fallback and not a refusal.
    """
    family, m = match_family(text, _WARNING_FAMILIES)
    return _verdict(family, m) if family is not None else None


def fallback_from_warning(text):
    """(reason_kind, op or None, min_macos or None) when a warning says work ran on the CPU; else None.

    Known wordings come from the catalogue. Any other warning counts by meaning:
    it says the work falls back to, runs on, or was moved to the CPU, and does
    not say that it cannot. The op is the one the text names, else None (the
    caller knows which aten op was being dispatched when the warning fired).
    """
    text = str(text or "")
    verdict = read_warning(text)
    if verdict is not None:
        if verdict.status != FALLBACK:
            return None
        return verdict.reason_kind, verdict.op, verdict.min_macos
    if not _SAYS_CPU.search(text) or _DENIES.search(text):
        return None
    op = None
    for pattern in _NAMES_OP:
        m = pattern.search(text)
        if m:
            op = _qualify(m.group("op"), None)
            break
    return "kernel_fallback", op, normalise_macos(text)


def fallback_ops(messages):
    """The ops named by CPU-fallback warnings among `messages`, in order, once each."""
    found = []
    for text in messages:
        fallback = fallback_from_warning(text)
        if fallback and fallback[1] and fallback[1] not in found:
            found.append(fallback[1])
    return found


# --- reading a dead worker's stderr ------------------------------------------------------------

def crash_evidence(stderr_tail):
    """What a dead worker's last stderr lines say, as a dict; None if they name no known cause.

    Keys: family, reason_kind, op, dtype, min_macos, line (the line that says it).
    An uncaught C++ exception is read through the exception catalogue, so the op
    and the reason of "terminating due to uncaught exception of type
    c10::NotImplementedError: The operator 'aten::…'" are those of the message.
    """
    lines = [line.strip() for line in str(stderr_tail or "").splitlines() if line.strip()]
    for at in range(len(lines) - 1, -1, -1):
        line = lines[at]
        family, m = match_family(line, _CRASH_FAMILIES)
        if family is None:
            continue
        if family.name == "mpsgraph_compile_error":
            line = _with_diagnostic(lines, at)
        evidence = dict(family=family.name, reason_kind=family.reason_kind, op=None, dtype=None,
                        min_macos=None, line=line)
        if "message" in m.groupdict():
            inner = classify_message(m.group("message"))
            if inner is not None:
                evidence.update(reason_kind=inner.reason_kind, op=inner.op, dtype=inner.dtype,
                                min_macos=inner.min_macos)
        return evidence
    return None


# An MLIR diagnostic, as MPSGraph prints it: 'loc("node"("(mpsFileLoc): ...":228:0)): error: ...',
# sometimes with "error: ..." on a line of its own after the location.
_MLIR_LOCATION = re.compile(r'loc\("[^"]*"\(')
_MLIR_ERROR = re.compile(r"(?:^|\): ?)error: \S")


def _with_diagnostic(lines, at):
    """The fatal line at `at`, after the MLIR diagnostic that says why when one comes just before it."""
    for start in range(at - 1, max(at - 3, -1), -1):
        found = _MLIR_LOCATION.search(lines[start])
        if found:
            cause = [lines[start][found.start():]] + lines[start + 1:at]   # without a progress bar before it
            if any(_MLIR_ERROR.search(text) for text in cause):
                return " ".join(cause + [lines[at]])
            break
    return lines[at]


def first_line(text, limit=500):
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --- what a result means -----------------------------------------------------------------------

WHAT_A_RESULT_MEANS = """\
Reason kinds, with one real message each (as PyTorch words it on MPS):

- no_kernel (unsupported): "The operator 'aten::histc' is not currently implemented for the MPS device. ..."
  (also torchvision::nms and any other namespace; torch 1.12 said "is not current implemented").
- dtype (unsupported): "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support
  float64. Please use float32 instead."
- macos_version (unsupported): "MPS BFloat16 is only supported on MacOS 14 or newer"; the minimum macOS
  ("14.0") is recorded with the result.
- size_limit (unsupported): "MPS supports tensors with dimensions <= 16, but got 17."
- argument (unsupported): "Adaptive pool MPS: input sizes must be divisible by output sizes. ..."
- out_of_memory (error): "MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB,
  max allowed: 18.13 GB). Tried to allocate 192.00 MB on private pool. ..."
- device_placement (error): "Placeholder storage has not been allocated on MPS device!"
- cpu_fallback (fallback): "The operator 'aten::_linalg_svd.U' is not currently supported on the MPS backend
  and will fall back to run on the CPU. This may have performance implications." (PYTORCH_ENABLE_MPS_FALLBACK=1)
- kernel_fallback (fallback): "MPS: nonzero op is supported natively starting from macOS 13.0. Falling back
  on CPU. This may have performance implications." (the kernel's own fallback; the minimum macOS is recorded)
- bug (error): anything else the target raised while the CPU did not, e.g. "[srcBuf length] > 0 INTERNAL ASSERT
  FAILED at .../OperationUtils.mm".
- signal (crash): the worker died; its last stderr line is kept, e.g. "MPSNDArray.mm:124: failed assertion
  `[MPSNDArrayDescriptor sliceDimension:withSubrange:] error: subRange.start (6) is not less than length of
  dimension[0] (6)'" (a crash that names a cause keeps that cause's kind: "total bytes of NDArray > 2**32" is
  size_limit, an uncaught "c10::NotImplementedError: The operator 'aten::…'" is no_kernel; MPSGraph's "LLVM
  ERROR: Failed to infer result type(s)." keeps the MLIR error printed before it).
- exit (crash): the worker exited during the case (SystemExit, os._exit) without a signal.
- hang (timeout): no result within the time budget; the worker was killed, and the device is checked (a
  tiny synchronised op) before the next timed case, whose results say so in `notes`.
- values, nonfinite, metadata (mismatch): the target ran natively, but "output: max abs error 0.52 (CPU's
  own: 0), 5.2e+02× the floors, allowed 1×", a NaN/Inf pattern, or a shape, dtype or device differs.
- no_unique_answer (skip): uninitialised memory (`empty*`), a sample too ill-conditioned in its dtype to
  judge (the CPU's own error beyond the cap), or a gradient through free phases or ties: what is unique checked.
- distribution (pass, mismatch): a random op's sample (normal, dropout with p > 0 in training, randperm, …),
  judged on the target alone by many draws against the distribution it promises, false-alarm rate ≤ 1e-6 per
  case (`probe/engine/distributions.py`), through the same form (in-place, out=) as the case.
- trivial_answer (mismatch): the output equals zeros or the input unchanged, which is wrong here.
- reduced_precision (pass, mismatch, skip): the kernel ran in a reduced-precision mode of the target (TF32,
  fast math), judged against that mode's error (README: Reduced precision and summation order).
- summation_order (pass): within the error any order of summation may make (blocked, split, Winograd, FFT).
- reference_failed (skip): the CPU itself raised on the sample, so there is nothing to compare with.
- forward_failed (skip): a backward, in-place or out= case whose forward already fails or differs on the
  target: "the forward's outputs differ on the target" (the forward case says why).
- no_gradient (skip): a backward case with nothing to differentiate: "no input of this sample requires grad".
- probe_fault (skip): mpsprobe's own code failed on the case, its exception kept: "mpsprobe could not judge
  this case: IndexError: ..."; no verdict either way, never counted as the target's bug.
- compiled_fallback (fallback): a compiled case (`--passes compiled`) whose compiled form left part of the op
  to eager kernels on the target, named in fallback_ops: a graph break ("aten::nonzero", "graph break: ...")
  or an op Inductor has no lowering for ("aten::sort.stable"). Not a CPU fallback.
- compile_failed (error): torch.compile raised while compiling the op for the target, where the eager op ran:
  "InductorError(LoweringException)", with the compiler's first line.
"""
