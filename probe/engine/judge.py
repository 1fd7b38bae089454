"""How one case is judged, beyond comparing numbers: per sample, from the sample itself.

- A random op's sample that draws (dropout with p > 0 in training, normal,
  bernoulli, ...) is judged by its distribution on the target
  (distributions.check_sample); one that does not (p = 0, eval mode) by values.
- Outputs with no unique answer for this sample (ties, repeated eigenvalues)
  are compared for shape only (ambiguity.py); eigen/singular vectors are
  compared up to phase and by reconstruction.
- Auxiliary outputs are noted, never deciding (auxiliary.py).
- An output computed in a reduced-precision mode of the target is held to
  that mode's error (precision.py).
- A sum, a matmul or a convolution the CPU's own error does not cover is
  held to the error of any summation order (summation_allowance,
  order_allowance): another order, blocking or algorithm is not a mismatch.
"""
import math
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from mpsprobe.vocabulary import (CHECK_KINDS, FALLBACK, MISMATCH, PASS, REASON_KINDS, SKIP)
from . import ambiguity, auxiliary, classify, distributions, precision

_kinds = dict(zip(REASON_KINDS, REASON_KINDS))
REFERENCE_FAILED, NO_UNIQUE_ANSWER, REDUCED, CPU_FALLBACK, SUMMATION_ORDER = (
    _kinds["reference_failed"], _kinds["no_unique_answer"], _kinds["reduced_precision"],
    _kinds["cpu_fallback"], _kinds["summation_order"])
VALUES_CHECK, DISTRIBUTION, SHAPE_CHECK, NO_CHECK = CHECK_KINDS

# Draws per distribution check: enough for a false-alarm rate of 1e-6 with
# power against the bugs in tests/test_distributions.py, and well under a
# second per case on a CPU.
DRAW_VALUES = 1 << 15
DRAW_CALLS = 1024


def shape_only(op_key):
    """Uninitialised memory (empty*): nothing but shape, dtype and device means anything."""
    return distributions.is_shape_only(op_key)


def random_sample(op_key, args):
    """Whether this sample of `op_key` draws random values (so has a distribution, not a value):
    a random op's drawing sample, or any op's sample applying dropout with p > 0 in training."""
    inp, rest, kwargs = args
    try:
        params = distributions.sample_params(op_key, inp, rest, kwargs)
    except Exception:
        # parameters unreadable: a random op's sample is never compared as values
        return distributions.random_op(op_key) is not None
    return distributions.is_random_sample(op_key, params)


def random_unchecked(op_key):
    """Why a random sample of `op_key` is checked for shape, dtype and device only (no
    distribution check is known for it), or None where its distribution is checked."""
    if distributions.random_op(op_key) is not None:
        return None
    return "dropout with p > 0 in training: random draws, no unique answer"


@dataclass
class Judgement:
    target_out: object = None
    cpu_out: object = None
    truth_out: object = None
    unchecked: tuple = ()
    why: str = None          # why some outputs have no unique answer
    auxiliary: dict = field(default_factory=dict)
    cannot_tell: str = None  # why the outputs checked leave the case undecided


def prepare(op_key, cpu_args, target_out, cpu_out, truth_out, dtype):
    """The outputs in the form to compare them, and which have no unique answer.

    The target's outputs are read on the CPU here (their placement is judged before):
    rewriting them against the CPU's (pivots, orders, indices) must not depend on
    where the target put them.
    """
    inp, rest, kwargs = cpu_args
    target_out = _on_cpu(target_out)
    positions, dim, unchecked, why = ambiguity.tie_outputs(op_key, inp, rest, kwargs)
    if positions:
        try:
            target_out, cpu_out = (ambiguity.index_values(op_key, inp, out, positions, dim)
                                   for out in (target_out, cpu_out))
            truth_out = None  # the truth's indices are the CPU's business; values decide
        except Exception:  # a malformed target output: the plain comparison says so
            pass
    twice = ambiguity.written_twice(op_key, inp, rest, kwargs)
    if twice is not None:
        target_out, truth_out = (ambiguity.unwritten(out, cpu_out, twice) for out in (target_out, truth_out))
        why = (f"{int(twice.sum())} positions written more than once, where any write may win: "
               "not compared")
    if ambiguity.random_regions(op_key, kwargs):
        try:
            target_out, cpu_out = (ambiguity.pooled_promise(op_key, inp, rest, out) for out in (target_out, cpu_out))
            truth_out = None
            why = "random pooling regions: each output checked as some window's maximum"
        except Exception:  # a malformed target output: the plain comparison says so
            pass
    cpu_out_raw = cpu_out
    cannot_tell = None
    if op_key in ambiguity.VECTOR_OPS and isinstance(cpu_out, (tuple, list, torch.Tensor)):
        try:
            canon = [ambiguity.canonical(op_key, out, cpu_out, dtype) if out is not None else (None, (), None)
                     for out in (target_out, cpu_out, truth_out)]
        except Exception as e:
            # Vectors not put in canonical form are not unique as they stand: never compared
            # by value (a malformed output still fails on its structure, shape or dtype).
            canon = None
            unchecked = ambiguity.RAW_AMBIGUOUS.get(op_key, (0, 2))  # U and V(h) for the SVDs
            why = f"eigen/singular vectors not comparable up to phase ({type(e).__name__})"
            cannot_tell = f"{why}: the vectors are unchecked"
        if canon:
            (target_out, _, _), (cpu_out, unchecked, why), (truth_out, _, _) = canon
        if op_key in ("svd_lowrank", "pca_lowrank") and not ambiguity.lowrank_exact(
                op_key, (inp,) + tuple(rest), kwargs, cpu_out_raw, dtype):
            unchecked = tuple(range(4))
            why = "q below the matrix's rank: the approximation depends on the random projection"
    rules = auxiliary.auxiliary_outputs(op_key)
    n = len(cpu_out) if isinstance(cpu_out, (tuple, list)) else 1
    rules = {i: r for i, r in rules.items() if n > 1 and i < n}
    return Judgement(target_out, cpu_out, truth_out, tuple(unchecked), why, rules, cannot_tell)


def _on_cpu(out):
    # Only when something is elsewhere: rebuilding the tree would turn a torch.Size into a tuple.
    if not any(isinstance(x, torch.Tensor) and x.device.type != "cpu" for x in tree_flatten(out)[0]):
        return out
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) and x.device.type != "cpu"
                    else x, out)


# --- reduced-precision modes ----------------------------------------------------------

# Ops that keep "the op on |inputs| bounds the sum of |terms|" true around a matmul or a
# convolution: views, copies, and the additions and products of multilinear algebra.
_MULTILINEAR = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
    "clone", "contiguous", "detach", "alias", "as_strided", "slice", "select", "copy_", "copy", "empty",
    "empty_like", "zeros", "zeros_like", "new_zeros", "new_empty", "_to_copy", "unbind", "split",
    "narrow", "lift_fresh", "add", "add_", "mul", "mul_", "sum", "fill_", "zero_", "resolve_conj",
    "resolve_neg", "_conj", "conj", "view_as_real", "view_as_complex", "stack", "cat", "squeeze_",
    "unsqueeze_", "expand_as", "_reshape_alias", "flatten", "unflatten", "movedim", "mT", "mH",
})


def _multilinear(aten_ops):
    return all(precision.family_of(op) or precision.base_name(op) in _MULTILINEAR for op in aten_ops)


def _absolute(args, dtype):
    """`args` in magnitudes, widened: tensors |x| (complex kept complex), float scalars |x|."""
    wide = torch.complex128 if dtype.is_complex else torch.float64

    def mag(x):
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            return x.detach().abs().to(wide if x.dtype == dtype else x.abs().dtype)
        if isinstance(x, float):
            return abs(x)
        return x
    return tree_map(mag, args)


def precision_allowance(op, cpu_args, dtype, aten_ops, shapes, modes, cpu_out):
    """(Applicable or None, {output position: (Applicable, per-element allowance)}).

    The allowance is precision.mode_error_bound's worst case, from the sum of
    |terms| behind each output (the op run on magnitudes in float64): rigorous
    for multilinear ops only, so for other ops the mode is named, but nothing
    is allowed (the caller skips such a case rather than calling it wrong).
    """
    applicable = precision.applicable_mode(aten_ops, modes, dtype, shapes)
    if applicable is None or not _multilinear(aten_ops):
        return applicable, {}
    inp, rest, kwargs = _absolute(cpu_args, dtype)
    try:
        magnitudes = op(inp, *rest, **kwargs)
    except Exception:
        return applicable, {}
    k = applicable.reduction_length or max(
        (x.numel() for x in tree_flatten(cpu_args)[0] if isinstance(x, torch.Tensor)), default=1)
    allowed = {}
    c_leaves, m_leaves = tree_flatten(cpu_out)[0], tree_flatten(magnitudes)[0]
    for i, (c, m) in enumerate(zip(c_leaves, m_leaves)):
        if isinstance(c, torch.Tensor) and isinstance(m, torch.Tensor) and c.shape == m.shape \
                and (c.is_floating_point() or c.is_complex()):
            allowed[i] = (applicable, precision.mode_error_bound(applicable.mode, k, m.abs()))
    return applicable, allowed


# Sums and scans: each output a sum of terms, each running sum rounded to the output dtype.
_SUMS = frozenset({"sum", "cumsum", "cumsum_", "_cumsum", "mean"})
_SUMMATION_MODES = {torch.float16: "fp16_summation", torch.bfloat16: "bf16_summation"}


def summation_allowance(op, cpu_args, dtype, aten_ops, cpu_out):
    """{output position: (Applicable, per-element allowance)} for a sum or scan in float16
    or bfloat16, else {}.

    Summing k terms with every running sum rounded (as the CPU does too), in whatever
    order, errs by at most k·u·Σ|terms| (recursive summation, u the unit roundoff):
    another order errs elsewhere, as much. Σ|terms| is the op run on magnitudes in
    float64; k the longest dimension of any input, the longest sum along one dim.
    """
    name = _SUMMATION_MODES.get(dtype)
    ops = {precision.base_name(a) for a in aten_ops or ()}
    if name is None or not ops & _SUMS or not ops <= (_MULTILINEAR | _SUMS) - {"mul", "mul_"}:
        return {}
    mode = precision.MODES[name]
    tensors = [x for x in tree_flatten(cpu_args)[0] if isinstance(x, torch.Tensor)]
    k = max((max(x.shape) for x in tensors if x.dim()), default=1)
    inp, rest, kwargs = _absolute(cpu_args, dtype)
    try:
        magnitudes = op(inp, *rest, **kwargs)
    except Exception:
        return {}
    applicable = precision.Applicable(mode, sorted(ops & _SUMS)[0], k)
    u = 2.0 ** -(mode.accumulate_bits + 1)
    allowed = {}
    for i, (c, m) in enumerate(zip(tree_flatten(cpu_out)[0], tree_flatten(magnitudes)[0])):
        if isinstance(c, torch.Tensor) and isinstance(m, torch.Tensor) and c.shape == m.shape \
                and c.is_floating_point():
            allowed[i] = (applicable, k * u * m.abs().to(torch.float64))
    return allowed


def _ones(args, dtype):
    """`args` with every float tensor and float scalar 1 (widened): run through a
    multilinear op, each output counts the products summed into it."""
    wide = torch.complex128 if dtype.is_complex else torch.float64

    def one(x):
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            return torch.ones(x.shape, dtype=wide if x.dtype == dtype else x.abs().dtype)
        if isinstance(x, (float, complex)):
            return 1.0
        return x
    return tree_map(one, args)


def _order_mode(aten_ops, dtype):
    """The any-order Mode for a matmul or a convolution (with views, sums and products
    around it) in `dtype`, else None."""
    ops = list(aten_ops or ())
    families = {precision.family_of(a) for a in ops}
    if not families & {precision.MATMUL, precision.CONVOLUTION} or not _multilinear(ops) \
            or not (dtype.is_floating_point or dtype.is_complex):
        return None
    wide = dtype in (torch.float64, torch.complex128)
    return precision.MODES["fp64_any_order" if wide else "fp32_any_order"]


def _order_bounds(mode, aten_ops, outputs, magnitudes, counts):
    """{position: (Applicable, allowance)} from the outputs, the same computed on magnitudes
    and on ones (the products summed into each output)."""
    reducing = next(a for a in aten_ops if precision.family_of(a))
    allowed = {}
    for i, (c, m, k) in enumerate(zip(*(tree_flatten(x)[0] for x in (outputs, magnitudes, counts)))):
        if all(isinstance(x, torch.Tensor) and x.shape == c.shape for x in (c, m, k)) \
                and (c.is_floating_point() or c.is_complex()):
            k = k.detach().abs().to(torch.float64)
            applicable = precision.Applicable(mode, reducing, int(k.max().item()) if k.numel() else 0)
            allowed[i] = (applicable, precision.any_order_bound(
                mode, k, m.detach().abs(), c.detach().abs(), c.dtype, outputs=c.numel()))
    return allowed


def order_may_decide(verdict):
    """Whether the error of another summation order may settle `verdict`: values beyond
    the policy, or within a CPU error beyond the cap (ill-conditioned in this dtype)."""
    return verdict.undecided or (not verdict.ok and verdict.reason_kind == "values")


def order_allowance(op, cpu_args, dtype, aten_ops, cpu_out):
    """{output position: (Applicable, per-element allowance)} for a matmul or a convolution
    (forward or backward, with views, sums and products around it), else {}.

    A correct kernel may sum the products behind an output in any order, blocked,
    split or in a transformed basis (cuDNN picks Winograd or FFT by its heuristics
    even with TF32 off): precision.any_order_bound allows that, from the number of
    products K per output (the op run on ones) and sum|products| (the op run on
    magnitudes), both in float64.
    """
    mode = _order_mode(aten_ops, dtype)
    if mode is None:
        return {}
    try:
        inp, rest, kwargs = _absolute(cpu_args, dtype)
        magnitudes = op(inp, *rest, **kwargs)
        inp, rest, kwargs = _ones(cpu_args, dtype)
        counts = op(inp, *rest, **kwargs)
    except Exception:
        return {}
    return _order_bounds(mode, list(aten_ops), cpu_out, magnitudes, counts)


def _requiring_grad(rebuilt, args):
    """`rebuilt` (args made of magnitudes or ones) with requires_grad where `args` has it."""
    leaves, spec = tree_flatten(rebuilt)
    for i, x in enumerate(tree_flatten(args)[0]):
        if isinstance(x, torch.Tensor) and x.requires_grad:
            leaves[i] = leaves[i].detach().requires_grad_(True)
    return tree_unflatten(leaves, spec)


def gradient_order_allowance(op, cpu_args, positions, grad_outputs, dtype, aten_ops, cpu_grads):
    """order_allowance for the gradients of a backward case (`positions`: the outputs
    differentiated, `grad_outputs` their seeded gradients): the gradient of a multilinear
    op is multilinear in the grad_outputs and the other inputs, so the backward run on
    magnitudes (and on ones) gives each gradient's sum|products| (and K)."""
    mode = _order_mode(aten_ops, dtype)
    if mode is None:
        return {}
    sides = []
    try:
        for rebuilt, seeds in ((_absolute(cpu_args, dtype), [g.abs() for g in grad_outputs]),
                               (_ones(cpu_args, dtype), [torch.ones_like(g) for g in grad_outputs])):
            inp, rest, kwargs = _requiring_grad(rebuilt, cpu_args)
            out = tree_flatten(op(inp, *rest, **kwargs))[0]
            outputs = [out[i] for i in positions]
            inputs = [x for x in tree_flatten((inp, rest, kwargs))[0]
                      if isinstance(x, torch.Tensor) and x.requires_grad]
            grads = torch.autograd.grad(outputs, inputs, [s.to(o.dtype) for s, o in zip(seeds, outputs)],
                                        allow_unused=True)
            sides.append([torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)])
    except Exception:
        return {}
    return _order_bounds(mode, list(aten_ops), list(cpu_grads), *sides)


# --- the status ---------------------------------------------------------------------

def status_of(verdict, how, fallen_back, shape_only_op, applicable, bounded):
    """(status, reason, reason kind) from a Verdict and what was learnt about the case."""
    if not verdict.ok:
        if applicable is not None and not bounded and verdict.reason_kind in (None, "values"):
            return (SKIP, f"ran in {applicable.mode.label}, whose error cannot be bounded for this op: "
                          f"{verdict.reason}", REDUCED)
        return MISMATCH, verdict.reason, verdict.reason_kind
    if fallen_back:
        return FALLBACK, f"fell back to the CPU: {', '.join(fallen_back)}", CPU_FALLBACK
    if verdict.undecided:
        return SKIP, verdict.reason, NO_UNIQUE_ANSWER
    if shape_only_op:
        return SKIP, "uninitialised memory: checked shape, dtype and device only", NO_UNIQUE_ANSWER
    if verdict.check_kind == SHAPE_CHECK:
        return SKIP, f"{how.why or 'no unique answer'}: checked shape, dtype and device only", NO_UNIQUE_ANSWER
    if verdict.precision_mode:
        mode = precision.MODES[verdict.precision_mode]
        if mode.family == precision.SUMMATION:
            return PASS, f"matches the CPU within the error of {mode.label}", SUMMATION_ORDER
        return PASS, f"matches the CPU within {mode.label}'s error", REDUCED
    return PASS, "matches the CPU within tolerance", None


def distribution(op_key, draw_args, target, form=None):
    """(status, reason, reason kind, extra fields, notes among them): the random sample judged by its
    distribution, drawn on the target (through the in-place or out= `form`, if given)."""
    inp, rest, kwargs = draw_args
    try:
        result = distributions.check_sample(op_key, inp, rest, kwargs, n=DRAW_VALUES, max_calls=DRAW_CALLS,
                                            form=form, context=target.context)
    except Exception as e:
        found = classify.classify_message(str(e), exc_type=type(e))
        return found.status, f"drawing again on the target: {classify.classify_error(e)[2]}", found.reason_kind, {
            "error_type": type(e).__name__, "message": classify.first_line(e), "aten_op": found.op,
            "min_macos": found.min_macos}
    fields = {"check_kind": DISTRIBUTION if result.status != SKIP else SHAPE_CHECK}
    if math.isfinite(result.statistic) and math.isfinite(result.threshold):
        fields["notes"] = [f"deciding statistic {result.statistic:.4g}, threshold {result.threshold:.4g}"]
    return result.status, result.detail, result.reason_kind, fields
