"""Reduced-precision modes: what a target's kernels may legitimately round away.

A CUDA device runs float32 convolutions in TF32 by default (cuDNN), may run
float32 matmuls in TF32 or bfloat16 (`torch.set_float32_matmul_precision`),
and may accumulate float16/bfloat16 matmuls in their own precision; Apple's
MPS has a fast-math switch. A kernel that ran in such a mode is correct when
its error is what the mode implies, so the verdict must judge it against
*that* error, derived from the mode, never against float32's floors, and never
against a hand-tuned constant.

Declarative records, in the manner of PyTorch's OpInfo: `MODES` says, per
mode, how many mantissa bits the kernel's inputs keep, in what precision it
accumulates, which ops it touches (`FAMILIES`) and which output dtypes.
`current_modes(device)` reads the settings, `active_modes` interprets them,
`strict_precision(device)` turns them off for a run, and `applicable_mode`
says which mode, if any, governs a case from the aten ops it dispatched.

The expected error (`mode_error_bound`), for one output y = sum_i a_i b_i over
a reduction of length K, with c_i = a_i b_i:

- Converting an input to a t-bit mantissa changes it by a relative delta with
  |delta| <= u = 2^-(t+1) when rounding to nearest. Some hardware paths
  truncate instead (|delta| < 2u, mean -u), so we take |delta - E delta| <= u
  and |E delta| <= u, which covers both.
- A product then has relative error delta_a + delta_b + delta_a delta_b, at
  most 2u + u^2 around its mean in size, and the output's error is
  sum_i c_i (delta_a,i + delta_b,i + ...). Worst case (rigorous, every error
  aligned): (4u + 4u^2) sum|c_i| (the 2u + u^2 of round-to-nearest, doubled
  for truncation).
- Statistically (the standard probabilistic model of rounding errors: those
  of different inputs independent): Bernstein's inequality over the K
  centred terms, union-bounded over the M outputs compared, gives with
  probability >= 1 - alpha
      |err| <= 2u|y| + sqrt(2 s^2 L) + b L / 3,  L = ln(2M / alpha),
  where 2u|y| bounds a truncating conversion's mean, b = (2u + 4u^2) max|c_i|
  bounds one centred term, and s^2 = VARIANCE_SAFETY (2u^2/3)(1 + 2u)^2
  sum c_i^2 their variance. An error uniform on [-u, u] (the usual model)
  has variance u^2/3; *any* error confined to [-u, u] has at most u^2, so
  VARIANCE_SAFETY = 3 is the factor that makes the bound hold whatever the
  distribution of the rounding errors: only their independence is assumed.
- Accumulating in a p-bit precision (unit roundoff v = 2^-(p+1)) adds, by
  Higham and Mary's probabilistic bound (SIAM J. Sci. Comput. 2019),
  lambda sqrt(K) v sum|c_i| with lambda = sqrt(2 ln(2KM / alpha)) (rigorous
  worst case: K v sum|c_i|).

The allowance is the smaller of the worst case and the statistical bound. A
truly wrong answer (one element off by 1 %, bfloat16's 7 bits where TF32's 10
were claimed, zeros) exceeds it; the tests show both sides on realistic
convolutions and matmuls.
"""
import contextlib
import math
import os
import re
from dataclasses import dataclass

import torch

ALPHA = 1e-6            # false-alarm rate per case, shared with the distribution checks
VARIANCE_SAFETY = 3.0   # max variance of an error on [-u, u] (u^2) over the uniform model's (u^2/3)

MATMUL, CONVOLUTION, RNN, FLOAT_OPS = "matmul", "convolution", "rnn", "float ops"
SUMMATION = "summation"  # not a setting: the freedom every reduction has (any_order_bound)

# aten base names (no overload) that each family's modes reach.
FAMILIES = {
    MATMUL: frozenset({
        "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "_addmm_activation",
        "einsum", "tensordot", "_scaled_mm", "mkldnn_linear",
        # scaled dot-product attention kernels are two matmuls and a softmax
        "_scaled_dot_product_attention_math", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu", "_efficient_attention_forward",
        "_flash_attention_forward", "scaled_dot_product_attention",
    }),
    CONVOLUTION: frozenset({
        "convolution", "_convolution", "convolution_backward", "_convolution_double_backward",
        "cudnn_convolution", "cudnn_convolution_transpose", "cudnn_convolution_relu",
        "cudnn_convolution_add_relu", "miopen_convolution", "mkldnn_convolution",
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    }),
    RNN: frozenset({"_cudnn_rnn", "_cudnn_rnn_backward", "lstm", "gru", "rnn_tanh", "rnn_relu",
                    "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"}),
}


@dataclass(frozen=True)
class Mode:
    name: str
    label: str              # how a report names it: "reduced precision: TF32"
    input_bits: int         # explicit mantissa bits the kernel's inputs keep (None: unchanged)
    accumulate_bits: int    # explicit mantissa bits of the accumulator
    family: str             # which ops it reaches (FAMILIES key, or FLOAT_OPS for every float op)
    dtypes: tuple           # output dtypes it applies to
    source: str             # where the fact comes from


_F32 = (torch.float32, torch.complex64)
MODES = {m.name: m for m in (
    Mode("tf32_matmul", "TF32", 10, 23, MATMUL, _F32,
         "torch.backends.cuda.matmul.allow_tf32 / fp32_precision, float32 matmul precision 'high'"),
    Mode("bf16_matmul", "bfloat16 matmul", 7, 23, MATMUL, _F32,
         "float32 matmul precision 'medium'; oneDNN fp32_precision 'bf16' on the CPU"),
    Mode("tf32_cudnn", "TF32", 10, 23, CONVOLUTION, _F32,
         "torch.backends.cudnn.allow_tf32 / cudnn.conv.fp32_precision (on by default)"),
    Mode("tf32_cudnn_rnn", "TF32", 10, 23, RNN, _F32, "torch.backends.cudnn.rnn.fp32_precision"),
    Mode("bf16_conv", "bfloat16 convolution", 7, 23, CONVOLUTION, _F32, "oneDNN conv fp32_precision 'bf16'"),
    Mode("fp16_reduction", "float16 reduction", None, 10, MATMUL, (torch.float16,),
         "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction (split-K in float16)"),
    Mode("bf16_reduction", "bfloat16 reduction", None, 7, MATMUL, (torch.bfloat16,),
         "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
    # Not a setting: a sum or scan whose running sums are rounded to float16/bfloat16
    # (as the CPU's own are), in an order of the kernel's choosing. Allowed to
    # sums and scans alone (judge.summation_allowance), never reached by a family.
    Mode("fp16_summation", "float16 summation order", None, 10, SUMMATION, (torch.float16,),
         "running sums rounded to float16, in any order"),
    Mode("bf16_summation", "bfloat16 summation order", None, 7, SUMMATION, (torch.bfloat16,),
         "running sums rounded to bfloat16, in any order"),
    # Not settings either: a matmul or convolution (forward or backward) may sum its terms
    # in any order, blocked, split or in a transformed basis (Winograd, FFT), accumulating
    # in float32 (half-precision outputs too, unless a reduction mode above is on) or
    # float64. Allowed to those families alone (judge.order_allowance); any_order_bound.
    Mode("fp32_any_order", "float32 summation in any order", None, 23, SUMMATION,
         (torch.float32, torch.complex64, torch.float16, torch.bfloat16, torch.complex32),
         "float32 accumulation, order and algorithm of the kernel's choosing"),
    Mode("fp64_any_order", "float64 summation in any order", None, 52, SUMMATION,
         (torch.float64, torch.complex128), "float64 accumulation, order and algorithm of the kernel's choosing"),
    # Not settings: a weight-only quantized matmul dequantizes its weights in the input's
    # dtype (each weight up to two roundings off) and sums in float32 in any order
    # (ops/module_bounds.py, int4_error_bound).
    Mode("bf16_dequantized", "weights dequantized to bfloat16, summed in any order", 7, 23, SUMMATION,
         (torch.bfloat16,), "quantized weights dequantized in bfloat16, float32 accumulation"),
    Mode("fp16_dequantized", "weights dequantized to float16, summed in any order", 10, 23, SUMMATION,
         (torch.float16,), "quantized weights dequantized in float16, float32 accumulation"),
    Mode("fp32_dequantized", "weights dequantized to float32, summed in any order", 23, 23, SUMMATION,
         (torch.float32,), "quantized weights dequantized in float32, float32 accumulation"),
    # Metal's fast math: reassociation plus function variants whose accuracy table
    # (Metal Shading Language specification, fast-math mode) goes down to absolute
    # errors near 2^-13 (sin, cos): modelled as a 13-bit mantissa on every float op.
    Mode("mps_fast_math", "MPS fast math", 13, 23, FLOAT_OPS, (torch.float32, torch.float16, torch.bfloat16),
         "PYTORCH_MPS_FAST_MATH=1"),
)}


# --- reading and switching the settings ---------------------------------------------

def _read(path):
    """`torch.backends.<path>` or None: attributes come and go across versions, and
    some getters raise when the legacy and new TF32 APIs were mixed."""
    obj = torch.backends
    try:
        for part in path.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj if isinstance(obj, (bool, str, int)) else None


_SETTINGS = (
    "cuda.matmul.allow_tf32", "cuda.matmul.fp32_precision",
    "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction",
    "cudnn.allow_tf32", "cudnn.conv.fp32_precision", "cudnn.rnn.fp32_precision",
    "mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision",
)
_ENV = ("PYTORCH_MPS_FAST_MATH", "PYTORCH_MPS_PREFER_METAL")


def current_modes(device):
    """The target's reduced-precision settings, as recorded with a run: a flat dict
    (setting -> value, None where this torch has no such setting)."""
    modes = {"device": torch.device(device).type}
    for path in _SETTINGS:
        modes[path] = _read(path)
    try:
        modes["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    except Exception:
        modes["float32_matmul_precision"] = None
    for name in _ENV:
        modes[name] = os.environ.get(name)
    return modes


def _on(value):
    return value not in (None, "", "0", "false", "False", False)


def active_modes(modes):
    """The Mode records the settings in `modes` (from current_modes) switch on for its device."""
    device, active = modes.get("device"), []
    precision = modes.get("float32_matmul_precision")
    if device == "cuda":
        matmul_new = modes.get("cuda.matmul.fp32_precision")
        if precision == "medium":
            active.append(MODES["bf16_matmul"])
        elif modes.get("cuda.matmul.allow_tf32") or matmul_new == "tf32" or precision == "high":
            active.append(MODES["tf32_matmul"])
        conv_new = modes.get("cudnn.conv.fp32_precision")
        if conv_new == "tf32" or (conv_new in (None, "none") and modes.get("cudnn.allow_tf32")):
            active.append(MODES["tf32_cudnn"])
        if modes.get("cudnn.rnn.fp32_precision") == "tf32" or (
                modes.get("cudnn.rnn.fp32_precision") in (None, "none") and modes.get("cudnn.allow_tf32")):
            active.append(MODES["tf32_cudnn_rnn"])
        if modes.get("cuda.matmul.allow_fp16_reduced_precision_reduction"):
            active.append(MODES["fp16_reduction"])
        if modes.get("cuda.matmul.allow_bf16_reduced_precision_reduction"):
            active.append(MODES["bf16_reduction"])
    elif device == "cpu":
        if modes.get("mkldnn.matmul.fp32_precision") == "bf16" or precision == "medium":
            active.append(MODES["bf16_matmul"])
        elif modes.get("mkldnn.matmul.fp32_precision") == "tf32":
            active.append(MODES["tf32_matmul"])
        if modes.get("mkldnn.conv.fp32_precision") == "bf16":
            active.append(MODES["bf16_conv"])
    elif device == "mps" and _on(modes.get("PYTORCH_MPS_FAST_MATH")):
        active.append(MODES["mps_fast_math"])
    return active


def _write(path, value):
    *parents, leaf = path.split(".")
    obj = torch.backends
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, leaf, value)


@contextlib.contextmanager
def strict_precision(device):
    """Every reduced-precision mode off inside, the previous settings restored after.

    Uses the new `fp32_precision` API where this torch has it (mixing it with
    the legacy flags makes the legacy getters raise), the legacy flags
    otherwise. The MPS environment switches are read when the MPS backend
    starts, so they are set here for a worker that has not used MPS yet.
    Yields current_modes(device) as they stand inside.
    """
    saved, saved_env = [], {}
    new_api = _read("cuda.matmul.fp32_precision") is not None
    wanted = [("cuda.matmul.allow_fp16_reduced_precision_reduction", False),
              ("cuda.matmul.allow_bf16_reduced_precision_reduction", False)]
    if new_api:
        wanted += [("cuda.matmul.fp32_precision", "ieee"), ("cudnn.conv.fp32_precision", "ieee"),
                   ("cudnn.rnn.fp32_precision", "ieee"), ("mkldnn.matmul.fp32_precision", "ieee"),
                   ("mkldnn.conv.fp32_precision", "ieee")]
    else:
        wanted += [("cuda.matmul.allow_tf32", False), ("cudnn.allow_tf32", False)]
    # Everything is read before anything is written: set_float32_matmul_precision
    # writes some of the fp32_precision flags itself.
    precision = torch.get_float32_matmul_precision()
    present = [(path, value, _read(path)) for path, value in wanted]
    try:
        torch.set_float32_matmul_precision("highest")
        for path, value, before in present:
            if before is None:
                continue  # absent in this torch
            _write(path, value)
            saved.append((path, before))
        if torch.device(device).type == "mps":
            for name in _ENV:
                saved_env[name] = os.environ.get(name)
                os.environ[name] = "0"
        yield current_modes(device)
    finally:
        # The precision first: in newer torch it writes the fp32_precision flags too.
        torch.set_float32_matmul_precision(precision)
        for path, before in reversed(saved):
            with contextlib.suppress(Exception):
                _write(path, before)
        for name, before in saved_env.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


# --- which mode governs a case --------------------------------------------------------

def base_name(aten_op):
    """`aten::convolution.default`, `aten.mm.default`, `mm` -> the base name: `convolution`, `mm`."""
    name = re.sub(r"^aten(::|\.)", "", str(aten_op))
    return name.split(".")[0]


def _out_of_place(aten_op):
    """The base name of `aten_op`'s out-of-place form: `addmm_` -> `addmm` (the same kernel family)."""
    base = base_name(aten_op)
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def family_of(aten_op):
    base = _out_of_place(aten_op)
    return next((family for family, names in FAMILIES.items() if base in names), None)


def reduction_length(aten_op, shapes, groups=1, transposed=False):
    """K, the length of the sums behind one output of `aten_op`, from its inputs' shapes.

    mm/bmm/matmul/linear: the inner dimension (linear's input's last); addmm,
    baddbmm, addbmm: their second argument's last; convolution: C_in/groups x
    prod(kernel) (weight is (C_out, C_in/groups, *k); transposed: (C_in,
    C_out/groups, *k), K <= C_in/groups x prod(k)); attention: the longer of
    the head dim and the key length. None when it cannot be told.
    """
    base = _out_of_place(aten_op)
    shapes = [tuple(s) for s in shapes]
    try:
        if base in ("mm", "bmm", "matmul", "linear", "einsum", "tensordot", "mkldnn_linear", "_scaled_mm"):
            return int(shapes[0][-1])
        if base in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
            return int(shapes[1][-1])
        if family_of(base) == CONVOLUTION:
            weight = shapes[1]
            kernel = math.prod(weight[2:])
            in_per_group = weight[0] // groups if transposed else weight[1]
            return int(in_per_group * kernel)
        if "attention" in base:
            q, k = shapes[0], shapes[1]
            return int(max(q[-1], k[-2]))
    except (IndexError, TypeError):
        return None
    return None


@dataclass(frozen=True)
class Applicable:
    mode: Mode              # the mode that governs the case
    aten_op: str            # the dispatched op it governs
    reduction_length: int   # K (None if the shapes were not given)

    @property
    def reason(self):
        return f"reduced precision: {self.mode.label}"


def applicable_mode(aten_ops, modes, dtype, shapes=None):
    """The Applicable mode for a case, or None.

    `aten_ops`: the ops the case dispatched (names or a dict of counts);
    `modes`: current_modes() of the target; `dtype`: the case's output dtype;
    `shapes`: optional {aten op: [input shapes]} to infer K.
    """
    active = [m for m in active_modes(modes) if dtype in m.dtypes]
    shapes = shapes or {}
    for op in aten_ops:
        family = family_of(op)
        for mode in active:
            if mode.family == family or (mode.family == FLOAT_OPS and (dtype.is_floating_point or dtype.is_complex)):
                op_shapes = shapes.get(op)
                k = reduction_length(op, op_shapes) if op_shapes else None
                if mode.family == FLOAT_OPS and k is None:
                    k = 1
                return Applicable(mode, str(op), k)
    return None


# --- the expected error ---------------------------------------------------------------

def _as64(x):
    return x.to(torch.float64) if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)


def mode_error_bound(mode, reduction_length, abs_sum, sq_sum=None, max_term=None, result_abs=None,
                     outputs=1, alpha=ALPHA):
    """The largest error a correct kernel running in `mode` may make, per output.

    `abs_sum` = sum_i |a_i b_i| (per output: a tensor, or one number),
    `reduction_length` = K. With `sq_sum` = sum_i (a_i b_i)^2, `max_term` =
    max_i |a_i b_i| (or an upper bound) and `result_abs` = |sum_i a_i b_i|, the
    statistical bound applies too, and the smaller of the two is returned.
    `outputs`: how many outputs are compared at once (the union bound's M).
    Derivation in the module docstring. Returns a float64 tensor (0-d for
    numbers).
    """
    mode = MODES[mode] if isinstance(mode, str) else mode
    k = max(int(reduction_length or 1), 1)
    abs_sum = _as64(abs_sum)
    u = 0.0 if mode.input_bits is None else 2.0 ** -(mode.input_bits + 1)
    v = 2.0 ** -(mode.accumulate_bits + 1)
    worst = (4 * u + 4 * u * u + k * v) * abs_sum
    if sq_sum is None or max_term is None or result_abs is None:
        return worst
    log_term = math.log(2 * max(int(outputs), 1) / alpha)
    variance = VARIANCE_SAFETY * (2 * u * u / 3) * (1 + 2 * u) ** 2 * _as64(sq_sum)
    inputs = (2 * u * _as64(result_abs) + torch.sqrt(2 * variance * log_term)
              + (2 * u + 4 * u * u) * _as64(max_term) * log_term / 3)
    lam = math.sqrt(2 * math.log(2 * k * max(int(outputs), 1) / alpha))
    statistical = inputs + lam * math.sqrt(k) * v * abs_sum
    return torch.minimum(worst, statistical)


def any_order_bound(mode, terms, abs_sum, result_abs, output_dtype, outputs=1, alpha=ALPHA):
    """The largest error a correct kernel may make on outputs that are sums of products,
    whatever order, blocking or algorithm it sums them with, accumulating in `mode`'s
    precision (unit roundoff v); per output, as a float64 tensor.

    `terms` = K, the number of products behind each output (a tensor or a number),
    `abs_sum` = sum_i |c_i|, `result_abs` = |y|, `outputs` = M, the outputs compared.

    Any summation tree (recursive, pairwise, blocked, split-K, atomics in any
    order) passes each term through at most n = K + 4 roundings (its product,
    at most K - 1 additions, and a bias's addition, a scaling by alpha, a
    final rounding and one to spare; one more and a factor sqrt(2) for a
    complex product). So the error is at most gamma_n sum|c_i|
    with gamma_n = n v / (1 - n v) (Higham, Accuracy and Stability, 3.1), and,
    with the rounding errors independent and of mean zero (the model of Higham
    and Mary, SIAM J. Sci. Comput. 2019, Theorem 3.1), at most
    (exp(lam sqrt(n) v + n v^2 / (1 - v)) - 1) sum|c_i| with probability
    1 - 2 n exp(-lam^2 (1 - v)^2 / 2) per output: lam is set so that this
    holds for all M outputs at once with probability 1 - alpha. The smaller of
    the two applies, plus the output's own rounding u_out |y| where the output
    is narrower than the accumulator.

    Transform-based algorithms (Winograd, FFT) sum transformed terms: their
    rounding errors are independent roundings of the same kind, amplified by
    the transforms' small norms, which the bound's lam (a tail bound, not the
    typical error: about sqrt(K) lam times what a blocked sum makes) absorbs;
    the tests check a Winograd F(4x4, 3x3) and an FFT weight gradient against it
    (both within a tenth of it, where the CPU's own error did not cover them).

    The statistical bound assumes independent rounding errors: true of random
    data (the probe's samples: OpInfo's, the replay's seeded normal values),
    known to fail for a sum of equal terms, whose errors repeat (10,000 x 0.1
    summed one by one in float32 errs 2.4 times this bound; the worst case
    still holds).
    """
    mode = MODES[mode] if isinstance(mode, str) else mode
    v = 2.0 ** -(mode.accumulate_bits + 1)
    complex_terms = output_dtype.is_complex
    n = _as64(terms).clamp_min(1) + (5 if complex_terms else 4)
    worst = torch.where(n * v < 0.5, n * v / (1 - n * v), torch.full_like(n, math.inf))
    lam = torch.sqrt(2 * torch.log(2 * n * max(int(outputs), 1) / alpha)) / (1 - v)
    statistical = torch.expm1(lam * torch.sqrt(n) * v + n * v * v / (1 - v))
    scale = math.sqrt(2) if complex_terms else 1.0
    real = {torch.complex32: torch.float16, torch.complex64: torch.float32,
            torch.complex128: torch.float64}.get(output_dtype, output_dtype)
    narrower = torch.finfo(real).eps > 2.0 ** -mode.accumulate_bits
    out_unit = torch.finfo(real).eps / 2 if narrower else 0.0
    return scale * torch.minimum(worst, statistical) * _as64(abs_sum) + out_unit * _as64(result_abs)


def reduction_magnitudes(fn, a, b):
    """abs_sum, sq_sum, max_term and result_abs for every output of a bilinear op fn(a, b)
    (mm, bmm, matmul, linear, convolution without bias), computed in float64.

    For a bilinear op, fn(|a|, |b|) is sum |a_i b_i| per output, fn(a^2, b^2) is
    sum (a_i b_i)^2, and fn(a^4, b^4)^(1/4) >= max |a_i b_i|.
    """
    a, b = a.detach().to(torch.float64).cpu(), b.detach().to(torch.float64).cpu()
    return {"abs_sum": fn(a.abs(), b.abs()), "sq_sum": fn(a * a, b * b),
            "max_term": fn(a ** 4, b ** 4) ** 0.25, "result_abs": fn(a, b).abs()}


def round_to_mantissa(t, bits, truncate=False):
    """`t` with each value's mantissa cut to `bits` explicit bits (TF32: 10, bfloat16: 7),
    rounding to nearest-even (or truncating), by integer arithmetic on the float32 bits.
    NaN and infinities stay; other dtypes go through float32 and back."""
    if not 0 <= bits <= 23:
        raise ValueError(f"bits must be within 0..23, got {bits}")
    x = t.to(torch.float32).contiguous()
    drop = 23 - bits
    if drop == 0:
        return x.to(t.dtype)
    i = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # unsigned, so the carry can't overflow
    if not truncate:
        lsb = (i >> drop) & 1
        i = i + ((1 << (drop - 1)) - 1) + lsb          # round half to even
    i = i & ~((1 << drop) - 1) & 0xFFFFFFFF
    i = torch.where(i >= 1 << 31, i - (1 << 32), i)   # back to int32's range
    out = i.to(torch.int32).view(torch.float32)
    out = torch.where(torch.isfinite(x), out, x)
    return out.to(t.dtype)
