"""Running one case: the op on one sample, on the reference and on the target."""
import time
import warnings

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import FALLBACK, MISMATCH, PASS, SKIP
from . import classify
from .aten import AtenCapture
from .verdict import compare
from .timing import median_ms


def _call(op, args):
    inp, rest, kwargs = args
    return op(inp, *rest, **kwargs)


def _result(status, reason, **fields):
    return {"status": status, "reason": reason, **fields}


def run_case(op, dtype, sample, target, nondeterministic=False, timing=True, unchecked=()):
    """A result dict (the results-table fields) for `op` on one SampleInput.

    `unchecked`: output positions whose values are not unique (see compare()).
    """
    started = time.perf_counter()
    cpu_args = sample_tools.call_args(sample)
    # Every copy is made before any call, in case an op writes into its inputs.
    # Moving to the target happens under the target's rules: MPS refuses float64 there.
    try:
        with target.context():
            target_args = sample_tools.to_device(cpu_args, target.torch_device)
    except Exception as e:
        status, aten_op, reason = classify.classify_error(e)
        return _result(status, f"inputs cannot be moved to the target: {reason}",
                       error_type=type(e).__name__, message=classify.first_line(e),
                       aten_op=aten_op, check_kind="none",
                       duration_s=time.perf_counter() - started)
    truth_args = None if nondeterministic else sample_tools.upcast(cpu_args, dtype)
    if truth_args is cpu_args:
        truth_args = None
    fields = {}

    capture = AtenCapture()
    try:
        with capture:
            cpu_out = _call(op, cpu_args)
    except Exception as e:
        return _result(SKIP, "the CPU reference raised: no ground truth",
                       error_type=type(e).__name__, message=classify.first_line(e),
                       check_kind="none", duration_s=time.perf_counter() - started)
    fields["aten_ops"] = capture.ops

    truth_out = None
    if truth_args is not None:
        try:
            truth_out = _call(op, truth_args)
        except Exception:
            truth_out = None  # float64 unsupported for this op: judge against the CPU itself

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

    verdict = compare(target_out, cpu_out, truth_out, dtype, values=not nondeterministic,
                      device_type=target.torch_device.type, unchecked=unchecked)
    fields.update(check_kind=verdict.check_kind, max_abs_err=verdict.max_abs_err,
                  max_rel_err=verdict.max_rel_err, ref_abs_err=verdict.ref_abs_err,
                  tol_atol=verdict.atol, tol_rtol=verdict.rtol,
                  tol_factor=verdict.factor if verdict.atol is not None else None,
                  nonfinite_mismatch=int(verdict.nonfinite_mismatch))
    if not verdict.ok:
        status, reason = MISMATCH, verdict.reason
    elif fallen_back:
        status, reason = FALLBACK, f"fell back to the CPU: {', '.join(fallen_back)}"
    elif nondeterministic:
        status, reason = SKIP, "nondeterministic op: checked shape, dtype and device only"
    elif verdict.check_kind == "shape":
        status, reason = SKIP, "outputs not unique (ties, signs): checked shape, dtype and device only"
    else:
        status, reason = PASS, "matches the CPU within tolerance"

    if timing:
        fields.update(_time(op, cpu_args, target_args, target))
    return _result(status, reason, duration_s=time.perf_counter() - started, **fields)


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
