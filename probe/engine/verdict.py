"""Judging a target's output against the CPU.

Tolerance policy: each output is compared with a float64 CPU "truth". The
target's error is scaled by per-dtype floors (atol + rtol·|truth|), and it
passes when that scaled error is at most max(1, FACTOR × the CPU's own scaled
error in the same dtype). So a float16 result is held to what the CPU achieves
in float16, not to float64 accuracy, and exact ops are held to the floors.
Integer and bool outputs must equal the CPU's exactly.

The CPU's own error widens the allowance only up to CAP (per dtype): beyond
it the sample is too ill-conditioned in this dtype to judge, and a target
that needs more than the cap is not passed (skipped, or a mismatch beyond
FACTOR × the CPU's error). And an allowance that a trivially wrong answer
(zeros, the input unchanged) would meet proves nothing: such an output is a
`trivial_answer` mismatch, and any other output must then match the CPU
itself within the floors to pass.

Beyond that, an output may get a derived allowance (`modes`: per output, an
Applicable and the error allowed per element): the error of the reduced-precision
mode its kernel ran in, or of another summation order for a sum, a matmul or a
convolution (precision.any_order_bound; the rule is in README, *Reduced precision
and summation order*). The verdict then names it (`precision_mode`), and an output
beyond even that allowance is a mismatch saying so.
"""
import math
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from mpsprobe.vocabulary import REASON_KINDS
from .auxiliary import compare_auxiliary
from .precision import SUMMATION

_kinds = dict(zip(REASON_KINDS, REASON_KINDS))
VALUES, TRIVIAL, NONFINITE, METADATA, NO_UNIQUE_ANSWER, REDUCED = (
    _kinds["values"], _kinds["trivial_answer"], _kinds["nonfinite"], _kinds["metadata"],
    _kinds["no_unique_answer"], _kinds["reduced_precision"])

FACTOR = 5.0
_F16 = (1e-3, 1e-3)
_BF16 = (1e-2, 1.6e-2)
_F32 = (1e-5, 1.3e-6)
_F64 = (1e-7, 1e-7)
FLOORS = {  # (atol, rtol)
    torch.float16: _F16, torch.complex32: _F16, torch.bfloat16: _BF16,
    torch.float32: _F32, torch.complex64: _F32,
    torch.float64: _F64, torch.complex128: _F64,
}
_F8 = (1e-1, 1.25e-1)
# The most the CPU's own error may widen the allowance, in units of the floors:
# about 1 % relative error in float16/bfloat16, 0.1 % in float32 and wider.
CAP = {torch.float16: 10.0, torch.complex32: 10.0, torch.bfloat16: 4.0}
CAP_DEFAULT = 1000.0
CAP_F8 = 2.0


def cap(dtype):
    if dtype in CAP:
        return CAP[dtype]
    return CAP_F8 if dtype.is_floating_point and dtype not in FLOORS else CAP_DEFAULT


def floors(dtype):
    if dtype in FLOORS:
        return FLOORS[dtype]
    if dtype.is_floating_point:  # float8 flavours
        return _F8
    return (0.0, 0.0)


@dataclass
class Verdict:
    ok: bool = True
    undecided: bool = False   # the evidence supports neither pass nor mismatch
    reason: str = ""
    reason_kind: str = None
    check_kind: str = "values"
    max_abs_err: float = None
    max_rel_err: float = None
    ref_abs_err: float = None
    atol: float = None
    rtol: float = None
    factor: float = FACTOR
    nonfinite_mismatch: bool = False
    precision_mode: str = None    # the reduced-precision mode that was needed to pass
    notes: list = field(default_factory=list)

    def fail(self, reason, kind=VALUES):
        if self.ok:
            self.ok, self.undecided, self.reason, self.reason_kind = False, False, reason, kind

    def cannot_tell(self, reason):
        if self.ok and not self.undecided:
            self.undecided, self.reason, self.reason_kind = True, reason, NO_UNIQUE_ANSWER

    def result_fields(self):
        """The results columns this verdict fills: how far it checked, the errors and the tolerance."""
        return dict(check_kind=self.check_kind, max_abs_err=self.max_abs_err,
                    max_rel_err=self.max_rel_err, ref_abs_err=self.ref_abs_err,
                    tol_atol=self.atol, tol_rtol=self.rtol,
                    tol_factor=self.factor if self.atol is not None else None,
                    nonfinite_mismatch=int(self.nonfinite_mismatch))

    def worst(self, attr, value):
        if value is not None and not math.isnan(value):
            current = getattr(self, attr)
            setattr(self, attr, value if current is None else max(current, value))


def _plain(t):
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.cpu().resolve_conj().resolve_neg()


def _scaled_error(x, truth, atol, rtol):
    """max |x - truth| / (atol + rtol·|truth|), and the max abs and rel errors."""
    diff = (x.to(truth.dtype) - truth).abs()
    scale = atol + rtol * truth.abs()
    if diff.numel() == 0:
        return 0.0, 0.0, 0.0
    ratio = (diff / scale).max().item()
    rel = (diff / truth.abs().clamp_min(max(atol, 1e-30))).max().item()
    return ratio, diff.max().item(), rel


def _close(x, y, atol, rtol):
    """Whether x is within the floors of y everywhere (both finite, same shape)."""
    return bool(((x - y).abs() <= atol + rtol * y.abs()).all())


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(t, c):
    """Whether two tensors of one dtype and shape hold the same bits everywhere (NaNs alike)."""
    try:
        if t.is_complex():
            t, c = torch.view_as_real(t), torch.view_as_real(c)
        bits = _SAME_SIZE_INT[t.element_size()]
        return torch.equal(t.view(bits), c.view(bits))
    except (KeyError, RuntimeError):
        return False   # a layout or dtype the bit view refuses: compared value by value


def _compare_identical(verdict, where, c, g):
    """_compare_floating for a target output bit for bit the CPU's: the same verdict (a pass, or
    ill-conditioned where the CPU's own error is beyond the cap), from one error computation.
    The errors recorded are the CPU's own, which are the target's."""
    dtype = c.dtype
    wide = torch.complex128 if c.is_complex() else torch.float64
    c = c.to(wide)
    g = g.to(wide) if g is not None and g.shape == c.shape else c
    finite = torch.isfinite(c) & torch.isfinite(g)
    atol, rtol = floors(dtype)
    verdict.atol, verdict.rtol = atol, rtol
    ratio, abs_err, rel_err = _scaled_error(c[finite], g[finite], atol, rtol)
    verdict.worst("max_abs_err", abs_err)
    verdict.worst("max_rel_err", rel_err)
    verdict.worst("ref_abs_err", abs_err)
    if ratio > max(1.0, min(verdict.factor * ratio, cap(dtype))):
        _ill_conditioned(verdict, where, dtype, abs_err, abs_err)


def _ill_conditioned(verdict, where, dtype, abs_c, abs_t):
    """Neither pass nor mismatch: the CPU's own error is beyond the cap, the target's within FACTOR of it."""
    verdict.cannot_tell(
        f"{where}: ill-conditioned in {str(dtype).replace('torch.', '')}: the CPU's own "
        f"error ({abs_c:.3g}) is beyond the cap, and the target's ({abs_t:.3g}) within it")


def _compare_floating(verdict, where, t, c, g, trivial=(), mode=None):
    """`trivial`: (name, tensor) answers no better than a guess; `mode`: (Applicable,
    per-element allowance) when the target ran this output in a reduced-precision mode."""
    if mode is None and _same_bits(t, c):
        # Most outputs of a CPU target and many of a GPU's: the trivial answers and the
        # pattern of NaNs cannot tell it from the CPU, so only the CPU's own error is left.
        return _compare_identical(verdict, where, c, g)
    dtype = c.dtype  # floors follow the output's precision, not the inputs'
    wide = torch.complex128 if t.is_complex() or c.is_complex() else torch.float64
    t, c = t.to(wide), c.to(wide)
    g = g.to(wide) if g is not None and g.shape == c.shape else c
    for check in (torch.isnan, torch.isposinf, torch.isneginf):
        if not t.is_complex() and not torch.equal(check(t), check(c)):
            verdict.nonfinite_mismatch = True
            return verdict.fail(f"{where}: NaN/Inf pattern differs from the CPU", NONFINITE)
    if t.is_complex() and not torch.equal(torch.isfinite(t), torch.isfinite(c)):
        verdict.nonfinite_mismatch = True
        return verdict.fail(f"{where}: NaN/Inf pattern differs from the CPU", NONFINITE)
    finite = torch.isfinite(t) & torch.isfinite(c) & torch.isfinite(g)
    extra = None
    if mode is not None:
        extra = torch.broadcast_to(mode[1].to(torch.float64), finite.shape)[finite]
    t, c, g = t[finite], c[finite], g[finite]
    trivial = [(name, z.to(wide)[finite]) for name, z in trivial if z.shape == finite.shape]
    atol, rtol = floors(dtype)
    verdict.atol, verdict.rtol = atol, rtol
    ratio_t, abs_t, rel_t = _scaled_error(t, g, atol, rtol)
    ratio_c, abs_c, _ = _scaled_error(c, g, atol, rtol)
    verdict.worst("max_abs_err", abs_t)
    verdict.worst("max_rel_err", rel_t)
    verdict.worst("ref_abs_err", abs_c)
    widened = verdict.factor * ratio_c
    bound = max(1.0, min(widened, cap(dtype)))
    # Trivial answers that are wrong here: beyond the floors of the truth. An allowance
    # that would admit one proves nothing beyond the floors.
    wrong = [(name, _scaled_error(z, g, atol, rtol)[0], z) for name, z in trivial]
    wrong = [(name, r, z) for name, r, z in wrong if r > 1.0]
    guessed = next((name for name, _, z in wrong if _close(t, z, atol, rtol)), None)
    if ratio_t > bound:
        def within_mode(x):
            return bool(((x - g).abs() <= extra + bound * (atol + rtol * g.abs())).all())
        if extra is not None and within_mode(t):
            # The derived allowance may not admit a trivially wrong answer either.
            admitted = [name for name, _, z in wrong if within_mode(z)]
            if admitted and not _close(t, c, atol, rtol):
                if guessed and ratio_t > verdict.factor:
                    return verdict.fail(f"{where}: equals {guessed}, which the allowance of "
                                        f"{mode[0].mode.label} would admit but is wrong here", TRIVIAL)
                return verdict.cannot_tell(f"{where}: the allowance of {mode[0].mode.label} would admit "
                                           f"{admitted[0]}, and the target differs from the CPU beyond the floors")
            verdict.precision_mode = mode[0].mode.name
            return
        if guessed and not _close(c, t, atol, rtol):
            return verdict.fail(f"{where}: equals {guessed}, which is wrong here "
                                f"({ratio_t:.3g}× the floors, allowed {bound:.3g}×)", TRIVIAL)
        if ratio_t <= widened:
            return _ill_conditioned(verdict, where, dtype, abs_c, abs_t)
        text = (f"{where}: max abs error {abs_t:.3g} (CPU's own: {abs_c:.3g}), "
                f"{ratio_t:.3g}× the floors, allowed {bound:.3g}×")
        if extra is not None and mode[0].mode.family == SUMMATION:
            return verdict.fail(f"{text}, beyond even the error of {mode[0].mode.label}", VALUES)
        if extra is not None:
            return verdict.fail(f"{text}, beyond even {mode[0].mode.label}'s error", REDUCED)
        return verdict.fail(text, VALUES)
    admitted = [name for name, r, _ in wrong if r <= bound]
    if admitted and not _close(t, c, atol, rtol):
        # Within FACTOR x the floors a correct kernel may come as near the guess as that
        # (the CPU itself errs that much here): neither pass nor mismatch.
        if guessed and ratio_t > verdict.factor:
            return verdict.fail(f"{where}: equals {guessed}, which the CPU's error margin "
                                f"would admit but is wrong here", TRIVIAL)
        verdict.cannot_tell(f"{where}: the allowance ({bound:.3g}× the floors) would admit "
                            f"{admitted[0]}, and the target differs from the CPU beyond the floors")


def _compare_tensor(verdict, where, t, c, g, values, device_type, trivial=(), mode=None):
    if t.shape != c.shape:
        return verdict.fail(f"{where}: shape {tuple(t.shape)} vs CPU {tuple(c.shape)}", METADATA)
    if t.dtype != c.dtype:
        return verdict.fail(f"{where}: dtype {t.dtype} vs CPU {c.dtype}".replace("torch.", ""), METADATA)
    if device_type is not None and t.device.type != device_type:
        return verdict.fail(f"{where}: output on {t.device.type}, expected {device_type}", METADATA)
    if not values:
        return
    t, c = _plain(t), _plain(c)
    if t.is_floating_point() or t.is_complex():
        trivial = [(name, _plain(z)) for name, z in trivial
                   if isinstance(z, torch.Tensor) and z.shape == c.shape and z.is_complex() == c.is_complex()]
        _compare_floating(verdict, where, t, c, _plain(g) if isinstance(g, torch.Tensor) else None,
                          trivial, mode)
    elif not torch.equal(t, c):
        mismatched = (t != c).sum().item()
        verdict.fail(f"{where}: {mismatched} of {t.numel()} values differ from the CPU")


def compare(target_out, cpu_out, truth_out, dtype, values=True, device_type=None, unchecked=(),
            auxiliary=None, trivial_input=None, modes=None):
    """A Verdict on `target_out` against `cpu_out` (same dtype) and `truth_out` (float64 or None).

    `values=False` checks only structure, shapes, dtypes and devices (nondeterministic ops);
    `unchecked` lists output positions whose values are not unique (indices under ties,
    eigenvector phases with repeated eigenvalues): those get the same shape-only check.
    `auxiliary`: {position: AuxRule} of outputs that are implementation details: noted
    (verdict.notes), never deciding. `trivial_input`: the sample's input before any
    call, a trivially wrong answer (with zeros) no output may get away with.
    `modes`: {position: (Applicable, allowance)} for outputs computed in a reduced-precision mode.
    """
    auxiliary, modes = auxiliary or {}, modes or {}
    verdict = Verdict(check_kind="values" if values else "shape")
    compared_values = values and not tree_flatten(cpu_out)[0]  # an empty structure is compared whole
    t_leaves, t_spec = tree_flatten(target_out)
    c_leaves, c_spec = tree_flatten(cpu_out)
    g_leaves = tree_flatten(truth_out)[0] if truth_out is not None else None
    if t_spec != c_spec or len(t_leaves) != len(c_leaves):
        verdict.fail("output structure differs from the CPU's", METADATA)
        return verdict
    if g_leaves is not None and len(g_leaves) != len(c_leaves):
        g_leaves = None
    for i, (t, c) in enumerate(zip(t_leaves, c_leaves)):
        where = f"output {i}" if len(c_leaves) > 1 else "output"
        g = g_leaves[i] if g_leaves is not None else None
        if i in auxiliary:
            ok, note = compare_auxiliary(auxiliary[i], c, t)
            verdict.notes.append(note if ok else f"{note} (promise broken)")
            continue
        check_values = values and i not in unchecked
        compared_values = compared_values or check_values
        if isinstance(c, torch.Tensor):
            if not isinstance(t, torch.Tensor):
                verdict.fail(f"{where}: {type(t).__name__} where the CPU gave a tensor", METADATA)
            else:
                trivial = [("zeros", torch.zeros_like(c))]
                if isinstance(trivial_input, torch.Tensor):
                    trivial.append(("the input unchanged", trivial_input))
                _compare_tensor(verdict, where, t, c, g, check_values, device_type, trivial, modes.get(i))
        elif check_values and isinstance(c, float) and isinstance(t, (int, float)):
            atol, rtol = floors(dtype) if dtype.is_floating_point else (1e-7, 1e-7)
            if not (t == c or math.isclose(t, c, rel_tol=rtol, abs_tol=atol)
                    or (math.isnan(t) and math.isnan(c))):
                verdict.fail(f"{where}: {t!r} vs CPU {c!r}")
        elif check_values and type(t) is not type(c):
            verdict.fail(f"{where}: {type(t).__name__} vs CPU {type(c).__name__}", "metadata")
        elif check_values and not isinstance(c, float) and t != c:
            verdict.fail(f"{where}: {t!r} vs CPU {c!r}")
        if not verdict.ok:
            break
    if not compared_values:
        verdict.check_kind = "shape"
    return verdict
