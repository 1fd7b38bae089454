"""Running one case: the op on one sample, on the reference and on the target."""
import time
import warnings

import torch
from torch.utils._pytree import tree_flatten

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import SKIP
from . import classify, judge
from .aten import AtenCapture, aten_name
from .judge import REFERENCE_FAILED
from .verdict import compare
from .timing import median_ms


def _call(op, args):
    inp, rest, kwargs = args
    return op(inp, *rest, **kwargs)


def _result(status, reason, **fields):
    return {"status": status, "reason": reason, **fields}


def _record_aten(op, args, cache, key):
    """The aten ops (and their first call's input shapes) that `op` dispatches on `args`.

    A call of its own, whose output is discarded: under a dispatch mode some
    kernels compute differently (complex pinv does), so the reference never runs
    under one. Once per (op, dtype, sample signature) is enough.
    """
    if cache is not None and key in cache:
        return cache[key]
    shapes = {}

    def on_call(func, call_args, call_kwargs, out):
        shapes.setdefault(aten_name(func), [tuple(x.shape) for x in tree_flatten((call_args, call_kwargs))[0]
                                            if isinstance(x, torch.Tensor)])
    capture = AtenCapture(on_call=on_call)
    try:
        with capture:
            _call(op, args)
    except Exception:
        pass  # the ops dispatched before it raised are still recorded
    recorded = (capture.ops, shapes)
    if cache is not None:
        cache[key] = recorded
    return recorded


def _first_tensor(args):
    inp = args[0]
    return inp.detach().clone() if isinstance(inp, torch.Tensor) else None


def run_case(op, dtype, sample, target, nondeterministic=False, timing=True, unchecked=(),
             op_key=None, aten_cache=None, modes=None):
    """A result dict (the results-table fields) for `op` on one SampleInput.

    `op_key`: the OpInfo op's key, which says how to judge it: a random sample by
    its distribution (judge.random_sample), outputs with no unique answer for this
    sample (judge.ambiguity), auxiliary outputs; `unchecked`: further output
    positions compared for shape only. `aten_cache`: a dict the worker keeps, so the
    aten ops of a sample signature are recorded once. `modes`: the target's
    precision settings (precision.current_modes), if any are to be honoured.
    """
    started = time.perf_counter()
    cpu_args = sample_tools.call_args(sample)
    random = judge.random_sample(op_key, cpu_args) if op_key else False
    # Every copy is made before any call, in case an op writes into its inputs.
    # Moving to the target happens under the target's rules: MPS refuses float64 there.
    try:
        with target.context():
            target_args = sample_tools.to_device(cpu_args, target.torch_device)
            draw_args = sample_tools.to_device(cpu_args, target.torch_device) if random else None
    except Exception as e:
        status, aten_op, reason = classify.classify_error(e)
        return _result(status, f"inputs cannot be moved to the target: {reason}",
                       error_type=type(e).__name__, message=classify.first_line(e),
                       aten_op=aten_op, check_kind="none",
                       duration_s=time.perf_counter() - started)
    shape_only = nondeterministic or (judge.shape_only(op_key) if op_key else False)
    values = not (shape_only or random)
    truth_args = sample_tools.upcast(cpu_args, dtype) if values else None
    record_args = None
    key = (op_key, str(dtype), sample_tools.summarize(sample))
    if aten_cache is None or key not in aten_cache:
        record_args = sample_tools.to_device(cpu_args, "cpu")
    trivial_input = _first_tensor(cpu_args)
    fields = {}

    try:
        cpu_out = _call(op, cpu_args)
    except Exception as e:
        return _result(SKIP, "the CPU reference raised: no ground truth", reason_kind=REFERENCE_FAILED,
                       error_type=type(e).__name__, message=classify.first_line(e),
                       check_kind="none", duration_s=time.perf_counter() - started)
    truth_out = None
    if truth_args is not None:
        try:
            truth_out = _call(op, truth_args)
        except Exception:
            truth_out = None  # float64 unsupported for this op: judge against the CPU itself
    aten_ops, aten_shapes = _record_aten(op, record_args, aten_cache, key)
    fields["aten_ops"] = aten_ops

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            target_out, target_args = _call_on_target(op, cpu_args, target_args, target)
        except Exception as e:
            status, aten_op, reason = classify.classify_error(e)
            return _result(status, reason, error_type=type(e).__name__,
                           message=classify.first_line(e), aten_op=aten_op,
                           check_kind="none",
                           fallback_ops=classify.fallback_ops(str(w.message) for w in caught),
                           duration_s=time.perf_counter() - started, **fields)
    fallen_back = classify.fallback_ops(str(w.message) for w in caught)
    fields["fallback_ops"] = fallen_back

    how = judge.Judgement()
    if values and op_key:
        how = judge.prepare(op_key, cpu_args, target_out, cpu_out, truth_out, dtype)
        target_out, cpu_out, truth_out = how.target_out, how.cpu_out, how.truth_out
    applicable, mode_allowance = None, {}
    if values and modes:
        applicable, mode_allowance = judge.precision_allowance(op, cpu_args, dtype, aten_ops, aten_shapes,
                                                              modes, cpu_out)
    verdict = compare(target_out, cpu_out, truth_out, dtype, values=values,
                      device_type=target.torch_device.type, unchecked=tuple(unchecked) + how.unchecked,
                      auxiliary=how.auxiliary, trivial_input=trivial_input, modes=mode_allowance)
    fields.update(check_kind=verdict.check_kind, max_abs_err=verdict.max_abs_err,
                  max_rel_err=verdict.max_rel_err, ref_abs_err=verdict.ref_abs_err,
                  tol_atol=verdict.atol, tol_rtol=verdict.rtol,
                  tol_factor=verdict.factor if verdict.atol is not None else None,
                  nonfinite_mismatch=int(verdict.nonfinite_mismatch))
    notes = list(verdict.notes) + ([how.why] if how.why else [])
    status, reason, kind = judge.status_of(verdict, how, fallen_back, shape_only, applicable,
                                           bool(mode_allowance))
    if random and verdict.ok and not fallen_back:
        status, reason, kind, drawn = judge.distribution(op_key, draw_args, target)
        notes += drawn.pop("notes", [])
        fields.update(drawn)
    if verdict.precision_mode:
        fields["precision_mode"] = verdict.precision_mode
    if notes:
        fields["notes"] = notes

    if timing:
        fields.update(_time(op, cpu_args, target_args, target))
    return _result(status, reason, reason_kind=kind, duration_s=time.perf_counter() - started, **fields)


def _call_on_target(op, cpu_args, target_args, target):
    """The op's output on the target, and the arguments that produced it.

    Some ops take index tensors that must stay on the CPU wherever the input
    is (tensor_split's indices_or_sections): when the target says so, the
    call is retried once with only the input moved, as a user would write it.
    """
    try:
        with target.context():
            out = _call(op, target_args)
            target.synchronize()
        return out, target_args
    except Exception as e:
        if not classify.WANTS_CPU_ARGUMENT.search(str(e)):
            raise
    inp, rest, kwargs = cpu_args
    with target.context():
        retry_args = (sample_tools.to_device(inp, target.torch_device),
                      sample_tools.to_device(rest, "cpu"), sample_tools.to_device(kwargs, "cpu"))
        out = _call(op, retry_args)
        target.synchronize()
    return out, retry_args


def _time(op, cpu_args, target_args, target):
    try:
        ref_ms = median_ms(lambda: _call(op, cpu_args), lambda: None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with target.context():
                target_ms = median_ms(lambda: _call(op, target_args), target.synchronize)
    except Exception:
        return {}
    return {"ref_ms": ref_ms, "target_ms": target_ms,
            "speedup": ref_ms / target_ms if target_ms > 0 else None}
