"""Running one case: the op on one sample, on the reference and on the target."""
import time
import warnings

import torch
from torch.utils._pytree import tree_flatten

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import FALLBACK, MISMATCH, REFUSED_AT_TRANSFER, SKIP
from .verdict import METADATA
from . import classify, judge, rulebook
from .aten import recorded_once
from .judge import NO_UNIQUE_ANSWER, REFERENCE_FAILED
from .verdict import compare
from .verdict import compare as compare_outputs
from .timing import both_sides, wanted as timing_wanted
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
    if aten_op is not None and not _is_aten_op(aten_op):
        # A kernel's own name for itself, not an operator ("nlld_loss", nll_loss2d's MPS
        # kernel): the dispatcher says which op raised it.
        notes["named_op"], aten_op = aten_op, None
    if aten_op is None and call is not None and verdict.reason_kind != OUT_OF_MEMORY:
        _, raised_by = witness(call, target)
        if raised_by:
            aten_op = raised_by
            notes["aten_op_from"] = "dispatch"
    return dict(status=verdict.status, reason=reason, reason_kind=verdict.reason_kind,
                aten_op=aten_op, min_macos=verdict.min_macos, error_type=type(exc).__name__,
                message=classify.first_line(exc), check_kind="none", notes=notes or None)


def _is_aten_op(name):
    """False only for an 'aten::' name that torch has no operator for (other namespaces load late)."""
    namespace, _, op = name.partition("::")
    if namespace != "aten":
        return True
    base, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return packet is not None and (not overload or overload in packet.overloads())


def fallbacks(texts, call=None, target=None, before=None):
    """What the CPU-fallback warnings among `texts` say, as a dict; None when none says work ran on the CPU.

    Keys: kind (cpu_fallback when PyTorch's generic fallback ran, else
    kernel_fallback), ops (named, in order, once each), min_macos (the highest
    named), unnamed (warnings whose op is still unknown), from_dispatch (ops
    named by the dispatch witness). A warning that names no op is attributed,
    when `call` is given, to the aten op being dispatched when it fired, by
    running the call once more under a DispatchWitness (after `before`, outside it:
    witness.witness).
    """
    found = [(text, classify.fallback_from_warning(text)) for text in texts]
    found = [(text, list(fb)) for text, fb in found if fb]
    if not found:
        return None
    for _, fb in found:
        if fb[1] and not _is_aten_op(fb[1]):
            fb[1] = None   # a word of the text, not an operator ("torch.nn.functional…"): the dispatcher says
    from_dispatch = []
    if call is not None and any(fb[1] is None for _, fb in found):
        seen, _ = witness(call, target, before)
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


def _out_of_memory(exc):
    return classify.classify_message(str(exc), exc_type=type(exc)).reason_kind == OUT_OF_MEMORY


def _moved(cpu_args, target):
    with target.context():
        return sample_tools.to_device(cpu_args, target.torch_device)


def _record_aten(op, args, cache, key):
    """The aten ops that `op` dispatches on `args`, their first call's input shapes,
    their kernel variants ({op: [variant]}, aten.variant) and the dtypes they ran in
    ({op: [dtype]}, aten.filed_dtypes).

    A call of its own, whose output is discarded: under a dispatch mode some
    kernels compute differently (complex pinv does), so the reference never runs
    under one. Once per (op, dtype, sample signature) is enough.
    """
    def run(recorder):
        with recorder:
            _call(op, args)
    return recorded_once(cache, key, run)


def _misplaced(out, device_type):
    """Why the target's outputs are not all on its device, or None."""
    leaves = tree_flatten(out)[0]
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.device.type != device_type:
            where = f"output {i}" if len(leaves) > 1 else "output"
            return f"{where}: output on {t.device.type}, expected {device_type}"
    return None


def _first_tensor(args):
    inp = args[0]
    return inp.detach().clone() if isinstance(inp, torch.Tensor) else None


def filed_fallback(fell, status, kind, fields, notes):
    """Files a case's fallback warnings (`fallbacks()`'s answer) into its fields and notes;
    returns the case's reason kind, the fallback's own where the case is a fallback."""
    if not fell:
        return kind
    fields["min_macos"] = fell["min_macos"]
    if fell["from_dispatch"]:
        notes["fallback_ops_from"] = "dispatch"
    if status == FALLBACK:
        fields["aten_op"] = fell["ops"][0] if fell["ops"] else None
        return fell["kind"]
    if status == MISMATCH:
        notes["fell_back"] = fell["kind"]  # a mismatch that also ran on the CPU
    return kind


def run_case(op, dtype, sample, target, nondeterministic=False, timing=True, unchecked=(),
             op_key=None, aten_cache=None, modes=None, draw_form=None, reference=None, target_op=None,
             error_bound=None):
    """A result dict (the results-table fields) for `op` on one SampleInput.

    `op_key`: the OpInfo op's key, or a replayed call's aten op, which says how to
    judge it (through rulebook.judged_as, one rule for both): a random sample by
    its distribution (judge.random_sample), outputs with no unique answer for this
    sample (judge.ambiguity), auxiliary outputs; `unchecked`: further output
    positions compared for shape only. `aten_cache`: a dict the worker keeps, so the
    aten ops of a sample signature are recorded once. `modes`: the target's
    precision settings (precision.current_modes), if any are to be honoured. `draw_form`:
    the form (INPLACE, OUT) `op` is, through which a random sample's draws are made.
    `reference`: the sample the CPU reference and the truth run on, when not `sample` itself:
    a layout variant's contiguous twin (ops/layouts.py), the same values in the layout the
    CPU's kernels are surest of, so a CPU kernel's own layout bug is never the reference.
    `target_op`: what runs on the target in place of `op` (its compiled form, compiled.py);
    the reference, the aten ops recorded and the judging rules stay `op`'s.
    `error_bound`: a module probe's own derived allowance (ops/module_bounds.py), used in place
    of the modes' and summation orders' when given.
    """
    started = time.perf_counter()
    cpu_args = sample_tools.call_args(reference if reference is not None else sample)
    laid_args = sample_tools.call_args(sample) if reference is not None else cpu_args
    rule, rule_args = rulebook.judged_as(op_key, cpu_args)
    random = judge.random_sample(rule, rule_args) if rule else False
    # Every copy is made before any call, in case an op writes into its inputs.
    # Moving to the target happens under the target's rules: MPS refuses float64 there.
    key = (op_key, str(dtype), sample_tools.summarize(sample))
    record_args = None
    if aten_cache is None or key not in aten_cache:
        record_args = sample_tools.to_device(laid_args, "cpu")
    try:
        target_args = _moved(laid_args, target)
        draw_args = _moved(laid_args, target) if random else None
    except Exception as e:
        fields = refusal(e)
        fields["reason"] = f"{REFUSED_AT_TRANSFER}: {fields['reason']}"
        # Nothing ran on the target: the ops the CPU dispatches are the ones refused.
        aten_ops, _, variants, dtypes = _record_aten(op, record_args, aten_cache, key)
        return dict(fields, aten_ops=aten_ops, aten_variants=variants, aten_dtypes=dtypes,
                    duration_s=time.perf_counter() - started)
    shape_only = nondeterministic or (judge.shape_only(rule) if rule else False)
    values = not (shape_only or random)
    truth_args = sample_tools.upcast(cpu_args, dtype) if values else None
    trivial_input = _first_tensor(cpu_args)
    fields = {}
    on_target = op if target_op is None else target_op

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
    if reference is not None:
        # A random or uninitialised output has no value to agree on: only a refusal counts.
        disagrees = _layout_disagrees(op, laid_args, cpu_out, truth_out, dtype,
                                      compare=not (random or shape_only))
        if disagrees:
            return _result(SKIP, disagrees[0], reason_kind=disagrees[1], check_kind="none",
                           duration_s=time.perf_counter() - started)
    aten_ops, aten_shapes, variants, dtypes = _record_aten(op, record_args, aten_cache, key)
    fields.update(aten_ops=aten_ops, aten_variants=variants, aten_dtypes=dtypes)

    notes = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out_of_memory = False
            try:
                target_out, target_args = _call_on_target(on_target, laid_args, target_args, target)
            except Exception as e:
                if not _out_of_memory(e):
                    raise
                out_of_memory = True
            if out_of_memory:
                # Out of memory may be the cache of earlier cases: empty it and try once more, with
                # fresh inputs. Not inside the except clause: until it ends, the exception's frames
                # hold the failed call's tensors, and emptying the cache would not free them.
                target_args = None
                target.empty_cache()
                notes["retried_after"] = OUT_OF_MEMORY
                target_args = _moved(laid_args, target)
                target_out, target_args = _call_on_target(on_target, laid_args, target_args, target)
        except Exception as e:
            refused = refusal(e, _target_call(on_target, target_args), target)
            # The device's memory when it refused: an out-of-memory says how full it was.
            refused["notes"] = dict(notes, **target.memory(), **(refused["notes"] or {})) or None
            fell = fallbacks([str(w.message) for w in caught])
            return dict(refused, fallback_ops=fell["ops"] if fell else [],
                        duration_s=time.perf_counter() - started, **fields)
    fell = fallbacks([str(w.message) for w in caught], _target_call(on_target, target_args), target)
    fields["fallback_ops"] = fell["ops"] if fell else []
    # Every fallback counts, named or not: a warning that names no op still says the work ran on the CPU.
    fallen_back = (fell["ops"] + (["an op no warning names"] if fell["unnamed"] else [])) if fell else []

    how = judge.Judgement(why=judge.random_unchecked(rule) if random else None)
    device_type = target.torch_device.type
    # Where the target put its outputs is judged on the outputs as returned: judge.prepare
    # may rewrite them (indices into values, canonical phases) on the CPU.
    misplaced = _misplaced(target_out, device_type)
    if values and rule:
        how = judge.prepare(rule, rule_args, target_out, cpu_out, truth_out, dtype)
        target_out, cpu_out, truth_out = how.target_out, how.cpu_out, how.truth_out
    applicable, mode_allowance = None, {}
    if values and error_bound is not None:
        mode_allowance = error_bound(cpu_args, dtype, cpu_out, modes)
        applicable = next(iter(mode_allowance.values()))[0] if mode_allowance else None
    elif values and modes:
        applicable, mode_allowance = judge.precision_allowance(op, cpu_args, dtype, aten_ops, aten_shapes,
                                                              modes, cpu_out)
    if values and not mode_allowance:
        mode_allowance = judge.summation_allowance(op, cpu_args, dtype, aten_ops, cpu_out)

    def judged_with(allowance):
        return compare(target_out, cpu_out, truth_out, dtype, values=values,
                       device_type=None, unchecked=tuple(unchecked) + how.unchecked,
                       auxiliary=how.auxiliary, trivial_input=trivial_input, modes=allowance)
    verdict = judged_with(mode_allowance)
    if values and not mode_allowance and judge.order_may_decide(verdict):
        # Only now: the bound for another summation order costs two more calls on the CPU.
        order = judge.order_allowance(op, cpu_args, dtype, aten_ops, cpu_out)
        verdict = judged_with(order) if order else verdict
    if misplaced:
        verdict.fail(misplaced, METADATA)
    if how.cannot_tell:
        verdict.cannot_tell(how.cannot_tell)
    fields.update(verdict.result_fields())
    judged = list(verdict.notes) + ([how.why] if how.why else [])
    status, reason, kind = judge.status_of(verdict, how, fallen_back, shape_only, applicable,
                                           bool(mode_allowance))
    if random and verdict.ok and not fallen_back and judge.random_unchecked(rule) is None:
        status, reason, kind, drawn = judge.distribution(rule, rulebook.judged_as(op_key, draw_args)[1],
                                                         target, draw_form)
        judged += drawn.pop("notes", [])
        fields.update(drawn)
    kind = filed_fallback(fell, status, kind, fields, notes)
    if verdict.precision_mode:
        fields["precision_mode"] = verdict.precision_mode
    if judged:
        notes["verdict"] = judged

    memory = target.memory()
    if timing_wanted(timing, status):
        fields.update(both_sides(lambda: _call(op, cpu_args), lambda: _call(op, target_args), target, notes))
        memory = _peak(memory, target.memory())
    notes.update(memory)
    fields["notes"] = notes or None
    return _result(status, reason, reason_kind=kind, duration_s=time.perf_counter() - started, **fields)


def _layout_disagrees(op, laid_args, twin_out, truth_out, dtype, compare=True):
    """(reason, reason kind) when the CPU itself cannot be the reference for a layout variant:
    it refuses the layout (a write into an expanded input), or answers otherwise than on the
    contiguous twin by the tolerance policy itself (an op that reads the storage, as_strided;
    ties broken otherwise; a CPU kernel's own layout bug): no ground truth either way. None when
    the CPU agrees with itself: then a target is judged against the twin as the CPU would be."""
    try:
        own = _call(op, sample_tools.to_device(laid_args, "cpu"))
    except Exception as e:
        return (f"the CPU reference raised on this layout: no ground truth ({type(e).__name__}: "
                f"{classify.first_line(e)[:160]})", REFERENCE_FAILED)
    if compare and not compare_outputs(own, twin_out, truth_out, dtype).ok:
        return ("the CPU's own answer on this layout differs from its answer on the same values laid "
                "out contiguously (an op that reads the storage, or a CPU kernel's layout bug): no "
                "ground truth", NO_UNIQUE_ANSWER)
    return None


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

