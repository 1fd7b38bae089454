"""Judging a target's output against the CPU.

Tolerance policy: each output is compared with a float64 CPU "truth". The
target's error is scaled by per-dtype floors (atol + rtol·|truth|), and it
passes when that scaled error is at most max(1, FACTOR × the CPU's own scaled
error in the same dtype). So a float16 result is held to what the CPU achieves
in float16, not to float64 accuracy, and exact ops are held to the floors.
Integer and bool outputs must equal the CPU's exactly.
"""
import math
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

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


def floors(dtype):
    if dtype in FLOORS:
        return FLOORS[dtype]
    if dtype.is_floating_point:  # float8 flavours
        return _F8
    return (0.0, 0.0)


@dataclass
class Verdict:
    ok: bool = True
    reason: str = ""
    check_kind: str = "values"
    max_abs_err: float = None
    max_rel_err: float = None
    ref_abs_err: float = None
    atol: float = None
    rtol: float = None
    factor: float = FACTOR
    nonfinite_mismatch: bool = False
    kind: str = None       # the reason kind of a failure: values, nonfinite or metadata
    _ratios: list = field(default_factory=list, repr=False)

    def fail(self, reason, kind="values"):
        if self.ok:
            self.ok, self.reason, self.kind = False, reason, kind

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


def _compare_floating(verdict, where, t, c, g):
    dtype = c.dtype  # floors follow the output's precision, not the inputs'
    wide = torch.complex128 if t.is_complex() or c.is_complex() else torch.float64
    t, c = t.to(wide), c.to(wide)
    g = g.to(wide) if g is not None and g.shape == c.shape else c
    for check in (torch.isnan, torch.isposinf, torch.isneginf):
        if not t.is_complex() and not torch.equal(check(t), check(c)):
            verdict.nonfinite_mismatch = True
            verdict.fail(f"{where}: NaN/Inf pattern differs from the CPU", "nonfinite")
            return
    if t.is_complex() and not torch.equal(torch.isfinite(t), torch.isfinite(c)):
        verdict.nonfinite_mismatch = True
        verdict.fail(f"{where}: NaN/Inf pattern differs from the CPU", "nonfinite")
        return
    finite = torch.isfinite(t) & torch.isfinite(c) & torch.isfinite(g)
    t, c, g = t[finite], c[finite], g[finite]
    atol, rtol = floors(dtype)
    verdict.atol, verdict.rtol = atol, rtol
    ratio_t, abs_t, rel_t = _scaled_error(t, g, atol, rtol)
    ratio_c, abs_c, _ = _scaled_error(c, g, atol, rtol)
    verdict.worst("max_abs_err", abs_t)
    verdict.worst("max_rel_err", rel_t)
    verdict.worst("ref_abs_err", abs_c)
    bound = max(1.0, verdict.factor * ratio_c)
    if ratio_t > bound:
        verdict.fail(f"{where}: max abs error {abs_t:.3g} (CPU's own: {abs_c:.3g}), "
                     f"{ratio_t:.3g}× the floors, allowed {bound:.3g}×")


def _compare_tensor(verdict, where, t, c, g, values, device_type):
    if t.shape != c.shape:
        return verdict.fail(f"{where}: shape {tuple(t.shape)} vs CPU {tuple(c.shape)}", "metadata")
    if t.dtype != c.dtype:
        return verdict.fail(f"{where}: dtype {t.dtype} vs CPU {c.dtype}".replace("torch.", ""), "metadata")
    if device_type is not None and t.device.type != device_type:
        return verdict.fail(f"{where}: output on {t.device.type}, expected {device_type}", "metadata")
    if not values:
        return
    t, c = _plain(t), _plain(c)
    if t.is_floating_point() or t.is_complex():
        _compare_floating(verdict, where, t, c, _plain(g) if isinstance(g, torch.Tensor) else None)
    elif not torch.equal(t, c):
        mismatched = (t != c).sum().item()
        verdict.fail(f"{where}: {mismatched} of {t.numel()} values differ from the CPU")


def compare(target_out, cpu_out, truth_out, dtype, values=True, device_type=None, unchecked=()):
    """A Verdict on `target_out` against `cpu_out` (same dtype) and `truth_out` (float64 or None).

    `values=False` checks only structure, shapes, dtypes and devices (nondeterministic ops);
    `unchecked` lists output positions whose values are not unique (indices under ties,
    eigenvector signs): those get the same shape-only check.
    """
    verdict = Verdict(check_kind="values" if values else "shape")
    compared_values = False
    t_leaves, t_spec = tree_flatten(target_out)
    c_leaves, c_spec = tree_flatten(cpu_out)
    g_leaves = tree_flatten(truth_out)[0] if truth_out is not None else None
    if t_spec != c_spec or len(t_leaves) != len(c_leaves):
        verdict.fail("output structure differs from the CPU's", "metadata")
        return verdict
    if g_leaves is not None and len(g_leaves) != len(c_leaves):
        g_leaves = None
    for i, (t, c) in enumerate(zip(t_leaves, c_leaves)):
        where = f"output {i}" if len(c_leaves) > 1 else "output"
        g = g_leaves[i] if g_leaves is not None else None
        check_values = values and i not in unchecked
        compared_values = compared_values or check_values
        if isinstance(c, torch.Tensor):
            if not isinstance(t, torch.Tensor):
                verdict.fail(f"{where}: {type(t).__name__} where the CPU gave a tensor", "metadata")
            else:
                _compare_tensor(verdict, where, t, c, g, check_values, device_type)
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
