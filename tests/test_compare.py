"""The tolerance policy, on outputs built by hand."""
import math

import torch

from mpsprobe.engine.verdict import FACTOR, compare, floors


def truth_and_cpu(values, dtype):
    truth = torch.tensor(values, dtype=torch.float64)
    return truth, truth.to(dtype)


def test_target_as_good_as_the_cpu_in_float16_passes():
    truth, cpu = truth_and_cpu([1.0001, 2.0003, 3.0007, 1000.3], torch.float16)
    target = cpu.clone()
    target[3] = target[3] + 0.5  # one float16 ulp at 1000: the CPU's own rounding class
    verdict = compare(target, cpu, truth, torch.float16)
    assert verdict.ok, verdict.reason
    assert (verdict.atol, verdict.rtol) == floors(torch.float16)


def test_error_well_beyond_the_cpus_own_is_a_mismatch():
    truth, cpu = truth_and_cpu([1.0, 2.0, 3.0], torch.float32)
    target = cpu * 1.01
    verdict = compare(target, cpu, truth, torch.float32)
    assert not verdict.ok
    assert math.isclose(verdict.max_abs_err, 0.03, rel_tol=1e-3)
    assert verdict.ref_abs_err == 0.0
    assert "max abs error" in verdict.reason


def test_bound_scales_with_the_cpus_own_error():
    truth = torch.tensor([1.0, 2.0], dtype=torch.float64)
    cpu = torch.tensor([1.001, 2.0], dtype=torch.float32)  # the CPU is off too
    atol, rtol = floors(torch.float32)  # floors follow the output's dtype
    scale = atol + rtol * truth.abs()
    cpu_ratio = (cpu.double() - truth).abs().div(scale).max().item()
    just_inside = truth + FACTOR * cpu_ratio * 0.9 * scale
    just_outside = truth + FACTOR * cpu_ratio * 1.2 * scale
    assert compare(just_inside.float(), cpu, truth, torch.bfloat16).ok
    assert not compare(just_outside.float(), cpu, truth, torch.bfloat16).ok


def test_integer_inputs_with_float_outputs_use_the_outputs_floors():
    truth = torch.tensor([0.25, 0.75], dtype=torch.float64)
    cpu = truth.clone()
    target = truth + 2e-16
    assert compare(target, cpu, truth, torch.int32).ok


def test_ambiguous_outputs_are_checked_for_shape_only():
    values, cpu_idx = torch.tensor([1.0, 1.0]), torch.tensor([0, 1])
    cpu = (values, cpu_idx)
    swapped = (values.clone(), torch.tensor([1, 0]))
    assert not compare(swapped, cpu, None, torch.float32).ok
    verdict = compare(swapped, cpu, None, torch.float32, unchecked=(1,))
    assert verdict.ok and verdict.check_kind == "values"
    only_indices = compare(torch.tensor([1, 0]), cpu_idx, None, torch.float32, unchecked=(0,))
    assert only_indices.ok and only_indices.check_kind == "shape"


def test_nan_where_the_cpu_has_a_number_is_a_mismatch():
    truth, cpu = truth_and_cpu([1.0, 2.0], torch.float32)
    target = cpu.clone()
    target[1] = float("nan")
    verdict = compare(target, cpu, truth, torch.float32)
    assert not verdict.ok and verdict.nonfinite_mismatch


def test_matching_infinities_pass():
    cpu = torch.tensor([float("inf"), -float("inf"), 1.0], dtype=torch.float16)
    assert compare(cpu.clone(), cpu, cpu.double(), torch.float16).ok


def test_integers_must_be_exact():
    cpu = torch.tensor([1, 2, 3])
    assert compare(cpu.clone(), cpu, None, torch.int64).ok
    off = compare(torch.tensor([1, 2, 4]), cpu, None, torch.int64)
    assert not off.ok and "1 of 3 values differ" in off.reason


def test_shape_dtype_and_structure_disagreements():
    cpu = torch.zeros(2, 3)
    assert "shape" in compare(torch.zeros(3, 2), cpu, None, torch.float32).reason
    assert "dtype" in compare(torch.zeros(2, 3, dtype=torch.float64), cpu, None, torch.float32).reason
    assert "structure" in compare((cpu, cpu), cpu, None, torch.float32).reason


def test_shape_only_check_ignores_values():
    cpu = torch.rand(4)
    verdict = compare(torch.rand(4), cpu, None, torch.float32, values=False)
    assert verdict.ok and verdict.check_kind == "shape"
    assert not compare(torch.rand(5), cpu, None, torch.float32, values=False).ok


def test_tuple_outputs_and_python_numbers():
    cpu = (torch.tensor([1.0, 2.0]), torch.tensor([0, 1]))
    assert compare((cpu[0].clone(), cpu[1].clone()), cpu, None, torch.float32).ok
    wrong = compare((cpu[0].clone(), torch.tensor([1, 0])), cpu, None, torch.float32)
    assert not wrong.ok and wrong.reason.startswith("output 1")
    assert compare(3.0, 3.0, 3.0, torch.float32).ok
    assert not compare(3.5, 3.0, 3.0, torch.float32).ok


def _bit_identical_cases():
    """(target, cpu, truth, dtype) where the target holds the CPU's bits exactly."""
    g = torch.Generator().manual_seed(7)
    wide = torch.randn(6, 5, generator=g, dtype=torch.float64)
    cases = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        cpu = wide.to(dtype)
        cases.append((cpu.clone(), cpu, wide, dtype))
    special = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0, -0.0], dtype=torch.float64)
    cases.append((special.float().clone(), special.float(), special, torch.float32))
    # Ill-conditioned: the CPU's own float16 error is far beyond the cap.
    truth = torch.tensor([1e-4, 2.0], dtype=torch.float64)
    far = torch.tensor([0.5, 2.0], dtype=torch.float16)
    cases.append((far.clone(), far, truth, torch.float16))
    # The CPU's answer is zeros where the truth is not (a trivial answer the CPU gave itself).
    cases.append((torch.zeros(3), torch.zeros(3), torch.tensor([1e-6, -1e-6, 0.0], dtype=torch.float64),
                  torch.float32))
    c = torch.complex(wide[:, :2], wide[:, 2:4])
    cases.append((c.to(torch.complex64).clone(), c.to(torch.complex64), c, torch.complex64))
    strided = wide.float().t()
    cases.append((strided.contiguous(), strided, wide.t(), torch.float32))
    cases.append((torch.empty(0, 3), torch.empty(0, 3), torch.empty(0, 3, dtype=torch.float64), torch.float32))
    cases.append((wide.float().clone(), wide.float(), None, torch.float32))   # no float64 truth
    return cases


def test_a_target_output_bit_for_bit_the_cpus_gets_the_verdict_of_the_full_comparison(monkeypatch):
    from mpsprobe.engine import verdict as verdict_module

    def fields(v):
        return (v.ok, v.undecided, v.reason, v.reason_kind, v.result_fields())
    shortcut = [fields(compare(t, c, g, dtype)) for t, c, g, dtype in _bit_identical_cases()]
    assert any(undecided for _, undecided, *_ in shortcut)   # the ill-conditioned case is among them
    monkeypatch.setattr(verdict_module, "_same_bits", lambda t, c: False)
    full = [fields(compare(t, c, g, dtype)) for t, c, g, dtype in _bit_identical_cases()]
    assert shortcut == full


def test_outputs_that_differ_only_in_the_sign_of_zero_or_a_nans_bits_are_compared_by_value():
    from mpsprobe.engine.verdict import _same_bits
    cpu = torch.tensor([0.0, float("nan"), 1.0])
    target = cpu.clone()
    target[0] = -0.0
    assert not _same_bits(target, cpu) and compare(target, cpu, cpu.double(), torch.float32).ok
    payload = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert not _same_bits(payload, torch.tensor([float("nan")]))
    assert compare(payload, torch.tensor([float("nan")]), None, torch.float32).ok
    wrong = cpu.clone()
    wrong[2] = 1.5
    assert not compare(wrong, cpu, cpu.double(), torch.float32).ok
