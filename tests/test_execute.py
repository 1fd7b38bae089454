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
