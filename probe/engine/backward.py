"""A backward case: the gradients of one sample, on the reference, the truth and the target.

The sample is the forward case's (same seed), made with `requires_grad` where
OpInfo says. Every differentiable output gets a seeded random `grad_output`;
`torch.autograd.grad` is taken with respect to every input that requires grad
(an unused input's gradient counts as zeros on every side). The gradients are
judged by the forward's tolerance policy (verdict.compare).

Eigen and singular vectors are differentiated in a canonical form (eig's order
matched, each vector's phase fixed by a pivot), whose gradient is unique. A
gradient is only judged where it has one answer: a random sample that draws, a
sample whose outputs have no unique answer (ties under an index-choosing op,
repeated eigen/singular values, positions written twice) and a forward that
already fails or differs on the target are skipped with the reason, never called
wrong. The aten ops the backward dispatches are recorded on a call of their own.
"""
import fnmatch
import time
import warnings
import zlib

import torch
from torch.utils._pytree import tree_flatten, tree_map

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import FALLBACK, REASON_KINDS, REFUSED_AT_TRANSFER, SKIP
from . import ambiguity, classify, distributions, judge, precision
from .aten import recorded_once
from .execute import (OUT_OF_MEMORY, _call, _call_on_target, _moved, _out_of_memory, _result, fallbacks,
                      filed_fallback, refusal)
from .timing import both_sides, wanted as timing_wanted
from .verdict import compare

_kinds = dict(zip(REASON_KINDS, REASON_KINDS))
REFERENCE_FAILED, NO_UNIQUE_ANSWER, FORWARD_FAILED, NO_GRADIENT, CPU_FALLBACK = (
    _kinds["reference_failed"], _kinds["no_unique_answer"], _kinds["forward_failed"], _kinds["no_gradient"],
    _kinds["cpu_fallback"])

# Ops whose gradient goes to the element they chose (through an index or a sort's
# order): with equal values in the input, another device may choose another one, and
# its gradient with it. Not here: the ops whose indices ambiguity.tie_outputs judges
# along their dim (sort, topk, kthvalue, mode, max/min and median over a dim), and
# those whose gradient is shared evenly among equal values, the same on every device
# (amax, amin, aminmax, max/min/median/nanmedian over everything).
_CHOOSING = ("nn.functional.max_pool*", "nn.functional.adaptive_max_pool*",
             "nn.functional.fractional_max_pool*", "cummax", "cummin", "msort", "masked.median",
             "quantile", "nanquantile", "nn.functional.embedding_bag")


def _chooses(op_key):
    return any(fnmatch.fnmatchcase(op_key, p) for p in _CHOOSING)


def _no_unique_gradient(op_key, args):
    """Why this sample's gradient has no unique answer, or None."""
    inp, rest, kwargs = args
    if judge.shape_only(op_key):
        return "uninitialised memory has no gradient to compare"
    if judge.random_sample(op_key, args) and op_key not in distributions.DRAW_WITHOUT_GRADIENT:
        return "a random sample: its gradient depends on the values drawn, which differ on the target"
    if ambiguity.tie_outputs(op_key, inp, rest, kwargs)[0] or ambiguity.random_regions(op_key, kwargs):
        return "ties: the chosen element, and so the gradient, may differ on another device"
    if ambiguity.written_twice(op_key, inp, rest, kwargs) is not None:
        return "positions written more than once: which write wins decides the gradient"
    if _chooses(op_key) and isinstance(inp, torch.Tensor) and inp.numel() > 1 and not inp.is_complex():
        along = _SCANS.get(op_key)
        if along is not None:  # a scan or sort along one dim: only ties along it choose
            dim = ambiguity._dim(rest, kwargs, along[0], along[1])
            if ambiguity._ties_along(inp, dim if inp.dim() else None):
                return "ties along the dim: the element chosen, and so the gradient, may differ"
        elif torch.unique(inp.detach()).numel() < inp.numel():
            return "equal values in the input: the element chosen, and so the gradient, may differ"
    return None


# Of _CHOOSING, the ops that choose along one dim: (positional index of the dim, its default).
_SCANS = {"cummax": (0, None), "cummin": (0, None), "msort": (99, 0)}


def _grad_inputs(args):
    return [x for x in tree_flatten(args)[0] if isinstance(x, torch.Tensor) and x.requires_grad]


def _grad_outputs(out):
    """Positions (in the flattened output) of the outputs a gradient flows back through."""
    leaves = tree_flatten(out)[0]
    return [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.requires_grad
            and (x.is_floating_point() or x.is_complex())]


def _picked(out, positions):
    leaves = tree_flatten(out)[0]
    return [leaves[i] for i in positions]


def _seeded_grad_outputs(outputs, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]


def _gradients(outputs, inputs, grad_outputs, retain=False):
    grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True, retain_graph=retain)
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs))


def _forward_backward(op, args, positions, grad_outputs, retain=False):
    """(outputs, inputs, gradients) of `op` on `args`."""
    out = _call(op, args)
    outputs = _picked(out, positions)
    inputs = _grad_inputs(args)
    return outputs, inputs, _gradients(outputs, inputs, grad_outputs, retain)


def _record_backward(op, args, positions, grad_outputs, cache, key, canonical):
    """The aten ops (and their first call's input shapes) the backward alone dispatches:
    a call of its own, never the reference's (a dispatch mode can change results)."""
    def run(recorder):
        outputs = _picked(canonical(_call(op, args)), positions)
        inputs = _grad_inputs(args)
        grads = [g.clone() for g in grad_outputs]
        with recorder:
            torch.autograd.grad(outputs, inputs, grads, allow_unused=True)
    return recorded_once(cache, key, run)


def _canonical_form(op_key, cpu_args, cpu_out, dtype):
    """(a function putting an output in the form whose gradient is unique, why there is none).

    Eigen and singular vectors have a free phase per vector (and eig's values no order):
    their gradients are taken through ambiguity.gauge_fixed, which is invariant under
    both, with pivots and order read on the CPU's output; with repeated values there is
    no unique gradient at all.
    """
    if op_key not in ambiguity.VECTOR_OPS:
        return (lambda out: out), None
    inp, rest, kwargs = cpu_args
    why = ambiguity.gradient_not_unique(op_key, (inp,) + tuple(rest), kwargs, cpu_out, dtype)
    reference = tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, cpu_out)
    return (lambda out: ambiguity.gauge_fixed(op_key, out, reference)), why


def _widened(grad_outputs, outputs):
    return [g.to(o.dtype) for g, o in zip(grad_outputs, outputs)]


def run_backward_case(op, dtype, sample, target, op_key, timing=True, aten_cache=None, modes=None):
    """A result dict (the results-table fields) for the gradients of `op` on one SampleInput."""
    started = time.perf_counter()

    def done(status, reason, kind, **fields):
        return _result(status, reason, reason_kind=kind, duration_s=time.perf_counter() - started, **fields)
    cpu_args = sample_tools.call_args(sample)
    if op_key in distributions.GRADIENT_CHECKED and judge.random_sample(op_key, cpu_args):
        return _random_gradient(op, dtype, sample, target, op_key, cpu_args, aten_cache, done)
    why = _no_unique_gradient(op_key, cpu_args)
    if why:
        return done(SKIP, why, NO_UNIQUE_ANSWER, check_kind="none")
    if not _grad_inputs(cpu_args):
        return done(SKIP, "no input of this sample requires grad", NO_GRADIENT, check_kind="none")
    def refused(e, prefix, **fields):
        """The result for an exception the target raised, read through the catalogue like a forward
        case's: reason kind, the op, the minimum macOS, the dtype named."""
        found = refusal(e)
        found["notes"] = dict(notes, **target.memory(), **(found["notes"] or {})) or None
        status, reason, kind = found.pop("status"), found.pop("reason"), found.pop("reason_kind")
        return done(status, prefix + reason, kind, **dict(found, **fields))

    notes = {}
    try:
        target_args = _moved(cpu_args, target)
    except Exception as e:
        return refused(e, f"{REFUSED_AT_TRANSFER}: ")
    truth_args = sample_tools.upcast(cpu_args, dtype)
    record_args = sample_tools.to_device(cpu_args, "cpu")
    summary = sample_tools.summarize(sample)

    # The reference: forward, then the gradients for seeded grad_outputs.
    try:
        cpu_out = _call(op, cpu_args)
        canonical, why = _canonical_form(op_key, cpu_args, cpu_out, dtype)
        if why:
            return done(SKIP, why, NO_UNIQUE_ANSWER, check_kind="none")
        cpu_out = canonical(cpu_out)
        positions = _grad_outputs(cpu_out)
        if not positions:
            return done(SKIP, "no output of this sample is differentiable", NO_GRADIENT, check_kind="none")
        cpu_outputs = _picked(cpu_out, positions)
        grad_outputs = _seeded_grad_outputs(cpu_outputs, zlib.crc32(f"{op_key}|{dtype}|{summary}".encode()))
        cpu_inputs = _grad_inputs(cpu_args)
        cpu_grads = _gradients(cpu_outputs, cpu_inputs, grad_outputs, retain=bool(timing))
    except Exception as e:
        return done(SKIP, "the CPU reference's backward raised: no ground truth", REFERENCE_FAILED,
                    check_kind="none", error_type=type(e).__name__, message=classify.first_line(e))
    truth_outputs = truth_grads = None
    if truth_args is not None:
        try:
            out = canonical(_call(op, truth_args))
            truth_outputs = _picked(out, positions)
            truth_grads = _gradients(truth_outputs, _grad_inputs(truth_args),
                                     _widened(grad_outputs, truth_outputs))
        except Exception:
            truth_outputs = truth_grads = None  # no float64 backward: judged against the CPU itself
    aten_ops, aten_shapes, variants, dtypes = _record_backward(op, record_args, positions, grad_outputs,
                                                       aten_cache, (op_key, str(dtype), summary), canonical)
    fields = {"aten_ops": aten_ops, "aten_variants": variants, "aten_dtypes": dtypes}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for attempt in (1, 2):
            out_of_memory = False
            try:
                target_out, target_args = _call_on_target(op, cpu_args, target_args, target)
                with target.context():
                    target_out = canonical(target_out)
            except Exception as e:
                if attempt == 2 or not _out_of_memory(e):
                    return done(SKIP, f"the forward fails on the target: {classify.classify_error(e)[2]}",
                                FORWARD_FAILED, check_kind="none", error_type=type(e).__name__,
                                message=classify.first_line(e), notes=notes or None, **fields)
                out_of_memory = True
            if not out_of_memory:
                # The forward must agree before its gradients can be judged alone.
                if len(tree_flatten(target_out)[0]) != len(tree_flatten(cpu_out)[0]):
                    return done(SKIP, "the forward's outputs differ on the target", FORWARD_FAILED,
                                check_kind="none", **fields)
                target_outputs = _picked(target_out, positions)
                # A draw (whose gradient does not depend on it) agrees in shape, dtype and device only.
                drawn = judge.random_sample(op_key, cpu_args)
                forward = compare([o.detach() for o in target_outputs], [o.detach() for o in cpu_outputs],
                                  [o.detach() for o in truth_outputs] if truth_outputs else None, dtype,
                                  values=not drawn, device_type=target.torch_device.type)
                if forward.undecided:
                    return done(SKIP, f"the forward has no unique answer here ({forward.reason})",
                                NO_UNIQUE_ANSWER, check_kind="none", **fields)
                if not forward.ok:
                    return done(SKIP, f"the forward differs on the target ({forward.reason}): its gradients "
                                      "are not judged on their own", FORWARD_FAILED, check_kind="none", **fields)
                backward_from = len(caught)  # the forward's own fallbacks are its case's to report
                try:
                    with target.context():
                        moved = sample_tools.to_device(grad_outputs, target.torch_device)
                        target_inputs = _grad_inputs(target_args)
                        target_grads = _gradients(target_outputs, target_inputs, moved, retain=bool(timing))
                        target.synchronize()
                except Exception as e:
                    if attempt == 2 or not _out_of_memory(e):
                        fell = fallbacks([str(w.message) for w in caught[backward_from:]])
                        return refused(e, "backward: ", fallback_ops=fell["ops"] if fell else [], **fields)
                    out_of_memory = True
            if not out_of_memory:
                break
            # Out of memory may be the cache of earlier cases: empty it and try once more, from fresh
            # inputs. Not inside the except clause, whose exception holds the failed call's tensors.
            target_out = target_outputs = target_inputs = moved = target_grads = target_args = None
            target.empty_cache()
            notes["retried_after"] = OUT_OF_MEMORY
            target_args = _moved(cpu_args, target)
    # Fallback by meaning, as in a forward case, among the backward's own warnings: one that names
    # no op is pinned on the op being dispatched when it fired (the backward runs again, witnessed).
    def forward_again():
        args = sample_tools.to_device(cpu_args, target.torch_device)
        with target.context():
            return _picked(canonical(_call(op, args)), positions), _grad_inputs(args)

    def backward_again(forward):
        _gradients(*forward, sample_tools.to_device(grad_outputs, target.torch_device))
    fell = fallbacks([str(w.message) for w in caught[backward_from:]], backward_again, target, forward_again)
    fields["fallback_ops"] = fell["ops"] if fell else []
    fallen_back = (fell["ops"] + (["an op no warning names"] if fell["unnamed"] else [])) if fell else []

    applicable = precision.applicable_mode(aten_ops, modes, dtype, aten_shapes) if modes else None
    verdict = compare(target_grads, cpu_grads, truth_grads, dtype, device_type=target.torch_device.type,
                      trivial_input=grad_outputs[0])
    if not applicable and judge.order_may_decide(verdict):
        # A matmul's or convolution's gradients may sum in any order (under a reduced-precision
        # mode their error is not bounded: skipped beyond the policy, below).
        allowance = judge.gradient_order_allowance(op, cpu_args, positions, grad_outputs, dtype, aten_ops,
                                                   cpu_grads)
        if allowance:
            verdict = compare(target_grads, cpu_grads, truth_grads, dtype, device_type=target.torch_device.type,
                              trivial_input=grad_outputs[0], modes=allowance)
    fields.update(verdict.result_fields())
    status, reason, kind = judge.status_of(verdict, judge.Judgement(), fallen_back, False, applicable, False)
    kind = filed_fallback(fell, status, kind, fields, notes)
    if verdict.notes:
        notes["verdict"] = list(verdict.notes)
    if verdict.precision_mode:
        fields["precision_mode"] = verdict.precision_mode
    if timing_wanted(timing, status):
        # The backward alone, on both sides (the graph kept between repetitions).
        fields.update(both_sides(lambda: _gradients(cpu_outputs, cpu_inputs, grad_outputs, True),
                                 lambda: _gradients(target_outputs, target_inputs, moved, True), target, notes))
    fields["notes"] = notes or None
    return done(status, reason.replace("output", "gradient", 1) if reason.startswith("output") else reason,
                kind, **fields)


def _random_gradient(op, dtype, sample, target, op_key, cpu_args, aten_cache, done):
    """A dropout or rrelu sample that draws: its gradient judged by its distribution on the
    target (distributions.check_gradient), for a seeded grad_output."""
    try:
        cpu_out = _call(op, cpu_args)
    except Exception as e:
        return done(SKIP, "the CPU reference raised: no ground truth", REFERENCE_FAILED, check_kind="none",
                    error_type=type(e).__name__, message=classify.first_line(e))
    if not _grad_outputs(cpu_out) or not _grad_inputs(cpu_args):
        return done(SKIP, "nothing to differentiate in this sample", NO_GRADIENT, check_kind="none")
    summary = sample_tools.summarize(sample)
    (grad_output,) = _seeded_grad_outputs([cpu_out], zlib.crc32(f"{op_key}|{dtype}|{summary}".encode()))
    aten_ops, _, variants, dtypes = _record_backward(op, sample_tools.to_device(cpu_args, "cpu"), [0],
                                                     [grad_output], aten_cache, (op_key, str(dtype), summary),
                                                     lambda out: out)
    fields = {"aten_ops": aten_ops, "aten_variants": variants, "aten_dtypes": dtypes}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with target.context():
                inp, rest, kwargs = sample_tools.to_device(cpu_args, target.torch_device)
                moved = sample_tools.to_device(grad_output, target.torch_device)
            result = distributions.check_gradient(op_key, inp, rest, kwargs, moved, n=judge.DRAW_VALUES,
                                                  max_calls=judge.DRAW_CALLS, context=target.context)
        except Exception as e:
            status, aten_op, reason = classify.classify_error(e)
            return done(status, f"backward: {reason}", None, check_kind="none", error_type=type(e).__name__,
                        message=classify.first_line(e), aten_op=aten_op, **fields)
    fallen_back = classify.fallback_ops(str(w.message) for w in caught)
    if fallen_back:
        return done(FALLBACK, f"fell back to the CPU: {', '.join(fallen_back)}", CPU_FALLBACK,
                    check_kind="none", fallback_ops=fallen_back, aten_op=fallen_back[0], **fields)
    notes = [f"deciding statistic {result.statistic:.4g}, threshold {result.threshold:.4g}"]
    return done(result.status, f"gradient: {result.detail}", result.reason_kind,
                check_kind=judge.DISTRIBUTION if result.status != SKIP else "none", notes=notes,
                fallback_ops=[], **fields)

