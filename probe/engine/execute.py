"""Running one case: the op on one sample, on the reference and on the target."""
import time
import warnings

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import FALLBACK, MISMATCH, PASS, SKIP
from . import classify
from .aten import AtenCapture
from .verdict import compare
from .timing import median_ms
from .witness import witness

OUT_OF_MEMORY = "out_of_memory"
CPU_FALLBACK, KERNEL_FALLBACK = "cpu_fallback", "kernel_fallback"


def _call(op, args):
    inp, rest, kwargs = args
    return op(inp, *rest, **kwargs)


def _result(status, reason, **fields):
    return {"status": status, "reason": reason, **fields}


def _macos_key(version):
    return tuple(int(x) for x in version.split("."))


def refusal(exc, call=None, target=None):
    """The result fields for an exception the target raised, read through the catalogue.

    Status, reason kind, the op (in any namespace), the minimum macOS and the
    dtype the message names. Where the message names no op and `call` is
    given, the call is run once more under a DispatchWitness: the op the same
    exception rose from is recorded, marked as such in the notes.
    """
    verdict = classify.classify_message(str(exc), exc_type=type(exc))
    notes = {}
    if verdict.dtype:
        notes["named_dtype"] = verdict.dtype
    if getattr(exc, "mpsprobe_at_synchronize", False):
        notes["raised_at"] = "synchronize"
    reason = classify.describe(verdict)
    if verdict.family is None and verdict.reason_kind == "bug":
        reason = f"{type(exc).__name__} on the target only"
    aten_op = verdict.op
    if aten_op is None and call is not None and verdict.reason_kind != OUT_OF_MEMORY:
        _, raised_by = witness(call, target)
        if raised_by:
            aten_op = raised_by
            notes["aten_op_from"] = "dispatch"
    return dict(status=verdict.status, reason=reason, reason_kind=verdict.reason_kind,
                aten_op=aten_op, min_macos=verdict.min_macos, error_type=type(exc).__name__,
                message=classify.first_line(exc), check_kind="none", notes=notes or None)


def fallbacks(texts, call=None, target=None):
    """What the CPU-fallback warnings among `texts` say, as a dict; None when none says work ran on the CPU.

    Keys: kind (cpu_fallback when PyTorch's generic fallback ran, else
    kernel_fallback), ops (named, in order, once each), min_macos (the highest
    named), unnamed (warnings whose op is still unknown), from_dispatch (ops
    named by the dispatch witness). A warning that names no op is attributed,
    when `call` is given, to the aten op being dispatched when it fired, by
    running the call once more under a DispatchWitness.
    """
    found = [(text, classify.fallback_from_warning(text)) for text in texts]
    found = [(text, list(fb)) for text, fb in found if fb]
    if not found:
        return None
    from_dispatch = []
    if call is not None and any(fb[1] is None for _, fb in found):
        seen, _ = witness(call, target)
        by_text = {}
        for text, op in seen:
            if op:
                by_text.setdefault(text, op)
        for text, fb in found:
            if fb[1] is None and by_text.get(text):
                fb[1] = by_text[text]
                from_dispatch.append(fb[1])
    ops = []
    for _, (_, op, _) in found:
        if op and op not in ops:
            ops.append(op)
    versions = [macos for _, (_, _, macos) in found if macos]
    kinds = {kind for _, (kind, _, _) in found}
    return {"kind": CPU_FALLBACK if CPU_FALLBACK in kinds else KERNEL_FALLBACK, "ops": ops,
            "min_macos": max(versions, key=_macos_key) if versions else None,
            "unnamed": sum(1 for _, (_, op, _) in found if not op), "from_dispatch": from_dispatch}


def _moved(cpu_args, target):
    with target.context():
        return sample_tools.to_device(cpu_args, target.torch_device)


def run_case(op, dtype, sample, target, nondeterministic=False, timing=True, unchecked=()):
    """A result dict (the results-table fields) for `op` on one SampleInput.

    `unchecked`: output positions whose values are not unique (see compare()).
    """
    started = time.perf_counter()
    cpu_args = sample_tools.call_args(sample)
    # Every copy is made before any call, in case an op writes into its inputs.
    # Moving to the target happens under the target's rules: MPS refuses float64 there.
    try:
        target_args = _moved(cpu_args, target)
    except Exception as e:
        fields = refusal(e)
        fields["reason"] = f"inputs cannot be moved to the target: {fields['reason']}"
        return dict(fields, duration_s=time.perf_counter() - started)
    truth_args = None if nondeterministic else sample_tools.upcast(cpu_args, dtype)
    if truth_args is cpu_args:
        truth_args = None
    fields = {}

    capture = AtenCapture()
    try:
        with capture:
            cpu_out = _call(op, cpu_args)
    except Exception as e:
        return _result(SKIP, "the CPU reference raised: no ground truth", reason_kind="reference_failed",
                       error_type=type(e).__name__, message=classify.first_line(e),
                       check_kind="none", duration_s=time.perf_counter() - started)
    fields["aten_ops"] = capture.ops

    truth_out = None
    if truth_args is not None:
        try:
            truth_out = _call(op, truth_args)
        except Exception:
            truth_out = None  # float64 unsupported for this op: judge against the CPU itself

    notes = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            try:
                target_out, target_args = _call_on_target(op, cpu_args, target_args, target)
            except Exception as e:
                if classify.classify_message(str(e), exc_type=type(e)).reason_kind != OUT_OF_MEMORY:
                    raise
                # Out of memory may be the cache of earlier cases: empty it and try once more.
                target.empty_cache()
                notes["retried_after"] = OUT_OF_MEMORY
                target_args = _moved(cpu_args, target)
                target_out, target_args = _call_on_target(op, cpu_args, target_args, target)
        except Exception as e:
            refused = refusal(e, _target_call(op, target_args), target)
            refused["notes"] = dict(notes, **(refused["notes"] or {})) or None
            fell = fallbacks([str(w.message) for w in caught])
            return dict(refused, fallback_ops=fell["ops"] if fell else [],
                        duration_s=time.perf_counter() - started, **fields)
    fell = fallbacks([str(w.message) for w in caught], _target_call(op, target_args), target)
    fields["fallback_ops"] = fell["ops"] if fell else []

    verdict = compare(target_out, cpu_out, truth_out, dtype, values=not nondeterministic,
                      device_type=target.torch_device.type, unchecked=unchecked)
    fields.update(check_kind=verdict.check_kind, max_abs_err=verdict.max_abs_err,
                  max_rel_err=verdict.max_rel_err, ref_abs_err=verdict.ref_abs_err,
                  tol_atol=verdict.atol, tol_rtol=verdict.rtol,
                  tol_factor=verdict.factor if verdict.atol is not None else None,
                  nonfinite_mismatch=int(verdict.nonfinite_mismatch))
    if fell:
        fields["min_macos"] = fell["min_macos"]
        if fell["from_dispatch"]:
            notes["fallback_ops_from"] = "dispatch"
    if not verdict.ok:
        status, reason = MISMATCH, verdict.reason
        fields["reason_kind"] = verdict.kind
        if fell:
            notes["fell_back"] = fell["kind"]  # a mismatch that also ran on the CPU
    elif fell:
        named = ", ".join(fell["ops"] + (["an op no warning names"] if fell["unnamed"] else []))
        status, reason = FALLBACK, f"fell back to the CPU: {named}"
        fields["reason_kind"] = fell["kind"]
        fields["aten_op"] = fell["ops"][0] if fell["ops"] else None
    elif nondeterministic:
        status, reason = SKIP, "nondeterministic op: checked shape, dtype and device only"
        fields["reason_kind"] = "no_unique_answer"
    elif verdict.check_kind == "shape":
        status, reason = SKIP, "outputs not unique (ties, signs): checked shape, dtype and device only"
        fields["reason_kind"] = "no_unique_answer"
    else:
        status, reason = PASS, "matches the CPU within tolerance"

    memory = target.memory()
    if timing:
        fields.update(_time(op, cpu_args, target_args, target))
        memory = _peak(memory, target.memory())
    notes.update(memory)
    fields["notes"] = notes or None
    return _result(status, reason, duration_s=time.perf_counter() - started, **fields)


def _peak(before, after):
    """Memory facts after timing, keeping the highest allocation seen at either point."""
    merged = dict(after)
    seen = [m.get("peak_allocated") for m in (before, after) if m.get("peak_allocated") is not None]
    if seen:
        merged["peak_allocated"] = max(seen)
    return merged


def _target_call(op, args):
    return lambda: _call(op, args)


def _synchronize(target):
    try:
        target.synchronize()
    except Exception as e:
        try:
            e.mpsprobe_at_synchronize = True  # an asynchronous error, surfacing only here
        except AttributeError:
            pass
        raise


def _call_on_target(op, cpu_args, target_args, target):
    """The op's output on the target, and the arguments that produced it.

    Some ops take index tensors that must stay on the CPU wherever the input
    is (tensor_split's indices_or_sections): when the target says so, the
    call is retried once with only the input moved, as a user would write it.
    """
    try:
        with target.context():
            out = _call(op, target_args)
            _synchronize(target)
        return out, target_args
    except Exception as e:
        if not classify.WANTS_CPU_ARGUMENT.search(str(e)):
            raise
    inp, rest, kwargs = cpu_args
    with target.context():
        retry_args = (sample_tools.to_device(inp, target.torch_device),
                      sample_tools.to_device(rest, "cpu"), sample_tools.to_device(kwargs, "cpu"))
        out = _call(op, retry_args)
        _synchronize(target)
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
