"""One case, in-process: the target call and its retry for CPU-only arguments."""
import torch
from torch.testing._internal.opinfo.core import SampleInput

from mpsprobe.engine.devices import Target
from mpsprobe.engine.execute import run_case


def test_cpu_only_arguments_are_retried_on_the_cpu():
    calls = []

    def split_like(inp, sections):
        calls.append(sections)
        if len(calls) == 2:  # the first target call: every argument was moved
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be on cpu, "
                               "but it's on cuda:0")
        return torch.tensor_split(inp, sections)

    sample = SampleInput(torch.arange(6.0), args=(torch.tensor([2, 4]),))
    result = run_case(split_like, torch.float32, sample, Target("cpu"), timing=False)
    assert result["status"] == "pass", result
    assert len(calls) >= 3  # reference, refused target call, retried target call


def test_other_errors_are_not_retried():
    def broken_on_target(inp):
        if not broken_on_target.seen:
            broken_on_target.seen = True
            return inp * 2
        raise RuntimeError("shape '[7]' is invalid for input of size 6")
    broken_on_target.seen = False
    result = run_case(broken_on_target, torch.float32, SampleInput(torch.ones(6)),
                      Target("cpu"), timing=False)
    assert result["status"] == "error" and result["error_type"] == "RuntimeError"


def test_placement_is_judged_on_the_outputs_as_the_target_returned_them():
    """Ties rewrite indices into values on the CPU before comparing: the device check
    must look at what the target returned, not at the rewritten outputs."""
    import torch
    from mpsprobe.engine.execute import _misplaced

    on_meta = torch.empty(3, device="meta")
    assert _misplaced((torch.ones(2), torch.ones(2)), "cpu") is None
    assert _misplaced((torch.ones(2), on_meta), "cpu") == "output 1: output on meta, expected cpu"
    assert _misplaced(on_meta, "meta") is None


class _Full(Target):
    """The CPU dressed as a device that is out of memory for the first `full` calls made on it."""

    def __init__(self, full):
        super().__init__("cpu")
        self.full, self.on_target, self.emptied = full, False, []

    def context(self):
        import contextlib

        @contextlib.contextmanager
        def on_target():
            self.on_target = True
            try:
                yield
            finally:
                self.on_target = False
        return on_target()

    def memory(self):
        return {"current_allocated": 17 << 30}


OUT_OF_MEMORY = ("MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB, max allowed: "
                 "18.13 GB). Tried to allocate 192.00 MB on private pool.")


def test_out_of_memory_is_retried_once_the_failed_call_s_tensors_are_gone():
    """The cache is emptied once the exception (and the frames it holds, with the failed call's
    tensors) is gone, and the first inputs dropped: otherwise emptying it frees nothing."""
    import gc
    import weakref
    refs = []

    class Full(_Full):
        def empty_cache(self):
            gc.collect()
            self.emptied.append([ref() is not None for ref in refs])

    target = Full(full=1)

    def grows(inp):
        scratch = inp * 2                       # held by this frame when it raises
        if target.on_target and target.full:
            target.full -= 1
            refs.extend([weakref.ref(scratch), weakref.ref(inp)])
            raise RuntimeError(OUT_OF_MEMORY)
        return scratch

    result = run_case(grows, torch.float32, SampleInput(torch.ones(6)), target, timing=False)
    assert result["status"] == "pass" and result["notes"]["retried_after"] == "out_of_memory"
    assert target.emptied == [[False, False]]   # neither the scratch nor the first inputs survived


def test_out_of_memory_twice_is_recorded_with_the_device_s_memory():
    target = _Full(full=2)

    def always_full(inp):
        if target.on_target and target.full:
            target.full -= 1
            raise RuntimeError(OUT_OF_MEMORY)
        return inp * 2
    result = run_case(always_full, torch.float32, SampleInput(torch.ones(6)), target, timing=False)
    assert (result["status"], result["reason_kind"]) == ("error", "out_of_memory")
    assert result["notes"] == {"retried_after": "out_of_memory", "current_allocated": 17 << 30}


def test_a_draw_refused_on_the_target_keeps_its_reason_kind():
    """A random op is drawn again on the target to judge its distribution: a refusal there is read
    through the catalogue like any other (here a macOS gate, with the version it names)."""
    from mpsprobe.engine import judge

    class Old(Target):
        def context(self):
            raise RuntimeError("MPS BFloat16 is only supported on MacOS 14 or newer")
    status, reason, kind, fields = judge.distribution("bernoulli", (torch.ones(3), (), {}), Old("cpu"))
    assert (status, kind, fields["min_macos"]) == ("unsupported", "macos_version", "14.0")
    assert reason.startswith("drawing again on the target:")


def test_an_op_name_that_is_no_operator_is_left_to_the_dispatcher():
    """MPS's nll_loss2d says "nlld_loss for complex is not supported for MPS": no such operator, so
    the op recorded is the one the same exception rose from when the call ran again."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from mpsprobe.engine.execute import refusal
    text = "nlld_loss for complex is not supported for MPS"

    class Refusing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.name().startswith("aten::nll_loss2d_forward"):
                raise RuntimeError(text)
            return func(*args, **(kwargs or {}))

    class Mps(Target):
        def context(self):
            return Refusing()

    def call():
        torch.nn.functional.nll_loss(torch.randn(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long))
    found = refusal(RuntimeError(text), call, Mps("cpu"))
    assert (found["status"], found["reason_kind"], found["aten_op"]) == ("unsupported", "dtype",
                                                                         "aten::nll_loss2d_forward")
    assert found["notes"] == {"named_dtype": "complex", "named_op": "aten::nlld_loss", "aten_op_from": "dispatch"}
    # A real operator named by a message is kept as it is.
    kept = refusal(RuntimeError("log_softmax for complex is not supported for MPS"), call, Mps("cpu"))
    assert kept["aten_op"] == "aten::log_softmax" and "named_op" not in (kept["notes"] or {})


def test_a_fallback_warning_naming_no_operator_is_pinned_by_dispatch():
    """'torch.nn.functional.grid_sample falls back…' reads as the op 'nn': no operator, so the
    warning counts as unnamed and the dispatcher names the op it fired in."""
    import warnings
    from torch.utils._python_dispatch import TorchDispatchMode
    from mpsprobe.engine.execute import fallbacks
    text = "torch.nn.functional.grid_sample falls back to the CPU for this input"

    class Warning(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.name().startswith("aten::grid_sampler_2d"):
                warnings.warn(text)
            return func(*args, **(kwargs or {}))

    class Mps(Target):
        def context(self):
            return Warning()

    def call():
        torch.nn.functional.grid_sample(torch.randn(1, 1, 3, 3), torch.zeros(1, 2, 2, 2), align_corners=False)
    assert fallbacks([text])["ops"] == [] and fallbacks([text])["unnamed"] == 1
    pinned = fallbacks([text], call, Mps("cpu"))
    assert pinned["ops"] == ["aten::grid_sampler_2d"] and pinned["from_dispatch"] == ["aten::grid_sampler_2d"]


def test_a_fault_of_the_probes_own_code_is_no_verdict_on_the_target(monkeypatch):
    """An exception the case's code did not catch is the probe's failure, not the target's:
    recorded as skip with reason kind probe_fault and the exception, never as error (a bug)."""
    from mpsprobe.engine import execute, worker
    from mpsprobe.vocabulary import ERROR, PROBE_FAULT, SKIP
    previous = torch.is_warn_always_enabled()  # a worker turns it on for its process's life
    try:
        sent = []
        w = worker.Worker({"device": "cpu", "samples": 2, "timing": False}, sent.append)

        def judging_fails(*args, **kwargs):
            raise IndexError("list index out of range")
        monkeypatch.setattr(execute, "run_case", judging_fails)
        w.pair({"op": "abs", "dtype": "float32", "passes": ["forward"]})
        w._flush()
        results = [m for m in sent if m.get("type") == "result"]
        assert results
        for result in results:
            assert (result["status"], result["reason_kind"]) == (SKIP, PROBE_FAULT) and result["status"] != ERROR
            assert result["reason"] == "mpsprobe could not judge this case: IndexError: list index out of range"
            assert result["error_type"] == "IndexError"
    finally:
        torch.set_warn_always(previous)
