"""MPS-wide rules: what holds for every op on MPS, whatever native_functions.yaml says.

Each rule is one of the message catalogue's families (mpsprobe.engine.messages)
turned into a prediction: the text PyTorch raises or warns, the status it
means, and the macOS it names. They apply before an op's own kernel is looked up:
no kernel helps a float64 tensor onto MPS. `example` is a text the family's
pattern recognises (tests/test_knowledge.py checks each one against the catalogue).

The bundled knowledge base (bundle.py) ships them beside the per-release
declarations, so an answer from it says which rule it rests on.
"""
from mpsprobe.vocabulary import FALLBACK, UNSUPPORTED

# The macOS the MPS backend needs at all, by torch release (from, minimum macOS).
# Seen in EmptyTensor.cpp: 12.3 up to 2.3 (kept until 2.6 changed it), 13.0 in 2.6, 14.0 from 2.9.
BACKEND_MACOS = (((2, 0), "12.3", "mps_needs_macos_12_3"),
                 ((2, 6), "13.0", "mps_needs_macos_13_or_14"),
                 ((2, 9), "14.0", "mps_needs_macos_13_or_14"))

# kind "dtype": every op in `dtype`; kind "op": the ops listed, in `dtypes` (all when empty).
# min_macos None: never on MPS; otherwise refused (or falling back) below that macOS.
RULES = (
    {"name": "no_float64", "kind": "dtype", "dtype": "float64", "min_macos": None,
     "status": UNSUPPORTED, "reason_kind": "dtype", "family": "float64_from_mps",
     "says": "MPS has no float64 at all: cast to float32 before .to('mps')",
     "example": "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                "support float64. Please use float32 instead."},
    {"name": "no_complex128", "kind": "dtype", "dtype": "complex128", "min_macos": None,
     "status": UNSUPPORTED, "reason_kind": "dtype", "family": "float64_from_mps",
     "says": "MPS has no complex128 (pairs of float64) at all",
     "example": "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                "support float64. Please use float32 instead."},
    {"name": "bfloat16_needs_macos_14", "kind": "dtype", "dtype": "bfloat16", "min_macos": "14.0",
     "status": UNSUPPORTED, "reason_kind": "macos_version", "family": "bfloat16_needs_macos_14",
     "says": "bfloat16 tensors need macOS 14",
     "example": "MPS BFloat16 is only supported on MacOS 14 or newer"},
    {"name": "complex_needs_macos_14", "kind": "dtype", "dtype": "complex64", "min_macos": "14.0",
     "status": UNSUPPORTED, "reason_kind": "macos_version", "family": "complex_needs_macos_14",
     "says": "complex tensors need macOS 14",
     "example": "MPS complex types are only supported on MacOS 14.0 or newer"},
    {"name": "fft_needs_macos_14", "kind": "op", "ops": ["aten::_fft_r2c", "aten::_fft_c2r", "aten::_fft_c2c"],
     "dtypes": [], "min_macos": "14.0", "status": UNSUPPORTED, "reason_kind": "macos_version",
     "family": "fft_needs_macos_14", "says": "FFT ops need macOS 14",
     "example": "FFT operations are only supported on MacOS 14+"},
    {"name": "pow_int64_needs_macos_13_2", "kind": "op", "ops": ["aten::pow.Tensor_Tensor",
                                                                 "aten::pow.Tensor_Scalar"],
     "dtypes": ["int64"], "min_macos": "13.2", "status": UNSUPPORTED, "reason_kind": "macos_version",
     "family": "pow_int64_needs_macos_13_2", "says": "pow with int64 input needs macOS 13.2",
     "example": "MPS: power op with int64 input is supported natively starting from macOS 13.2"},
    {"name": "inverse_falls_back_before_macos_13_3", "kind": "op", "ops": ["aten::linalg_inv_ex"],
     "dtypes": [], "min_macos": "13.3", "status": FALLBACK, "reason_kind": "kernel_fallback",
     "family": "inverse_from_macos_13", "says": "linalg_inv_ex falls back to the CPU below macOS 13.3",
     "example": "torch.linalg_inv_ex is supported by MPS on MacOS 13+, please upgrade. "
                "Falling back to CPU"},
)

# An op with no MPS kernel: PyTorch raises, unless PYTORCH_ENABLE_MPS_FALLBACK=1 runs it on the CPU.
GENERIC_FALLBACK = {"name": "generic_fallback", "family": "not_implemented_141287",
                    "says": "an op with no MPS kernel raises NotImplementedError; with "
                            "PYTORCH_ENABLE_MPS_FALLBACK=1 it runs on the CPU instead",
                    "example": "The operator 'aten::foo' is not currently implemented for the MPS "
                               "device. If you want this op to be considered for addition"}


def version_tuple(text):
    """(2, 13, 0) for "2.13.0+cpu"; (14, 0) for "14"; () for None."""
    out = []
    for part in (text or "").split("+")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def backend_macos(torch_version):
    """(the macOS the MPS backend of `torch_version` needs, the family saying so)."""
    wanted = version_tuple(torch_version)[:2]
    found = BACKEND_MACOS[0]
    for rule in BACKEND_MACOS:
        if wanted >= rule[0]:
            found = rule
    return found[1], found[2]


def below(macos, minimum):
    """Whether macOS `macos` is older than `minimum` (None: not known, so not below)."""
    return bool(macos) and version_tuple(macos) < version_tuple(minimum)


def applying(aten_op, dtype, macos, rules=RULES):
    """The first rule that condemns (aten_op, dtype) on `macos` (None: a macOS new enough
    for every gate, so only the rules that hold everywhere apply), or None."""
    for rule in rules:
        if rule["kind"] == "dtype" and rule["dtype"] != dtype:
            continue
        if rule["kind"] == "op" and (aten_op not in rule["ops"]
                                     or (rule["dtypes"] and dtype not in rule["dtypes"])):
            continue
        if rule["min_macos"] is None or below(macos, rule["min_macos"]):
            return rule
    return None
