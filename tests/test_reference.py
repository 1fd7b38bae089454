"""The reference and the verdict: nothing perturbs the CPU reference, samples move
faithfully, no tolerance admits a trivially wrong answer, and every skip is the sample's."""
import sys
from pathlib import Path

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from mpsprobe.engine.devices import Target
from mpsprobe.engine.execute import run_case
from mpsprobe.ops import opinfo
from mpsprobe.ops.samples import to_device, upcast
from mpsprobe.vocabulary import MISMATCH, PASS, REASON_KINDS

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

KIND = dict(zip(REASON_KINDS, REASON_KINDS))
CPU = Target("cpu")


@pytest.fixture(scope="module")
def ops():
    return {opinfo.op_key(o): o for o in opinfo.load_op_db()}


def _run(ops, key, dtype, target=CPU, n=3, **kw):
    op = ops[key]
    return [(s, run_case(op.op, dtype, s, target, timing=False, op_key=key, **kw))
            for s in opinfo.samples(op, dtype, n)]


# --- a reference nothing can perturb -------------------------------------------------

def test_complex_pinv_reference_is_exact_and_its_aten_ops_still_recorded():
    seen = []

    def pinv(inp):
        out = torch.linalg.pinv(inp)
        seen.append(out)
        return out
    m = torch.randn(5, 5, dtype=torch.complex128, generator=torch.Generator().manual_seed(0))
    result = run_case(pinv, torch.complex128, SampleInput(m), CPU, timing=False, op_key="linalg.pinv")
    reference = seen[0]  # the first call is the CPU reference
    assert (m @ reference @ m - m).abs().max().item() < 1e-12
    assert result["status"] == PASS
    assert any(name.startswith("aten::linalg_pinv") for name in result["aten_ops"])  # recorded apart


@pytest.mark.parametrize("key", ["linalg.pinv", "linalg.lstsq", "linalg.cond", "linalg.eigvalsh",
                                 "linalg.svdvals", "linalg.matrix_norm", "pinverse"])
def test_complex_linear_algebra_reference_matches_the_float64_truth(ops, key):
    for _, result in _run(ops, key, torch.complex64, n=4):
        assert result["status"] == PASS, result["reason"]
        assert (result["ref_abs_err"] or 0.0) < 1e-3, result


# --- samples moved faithfully ---------------------------------------------------------

def test_a_view_keeps_its_base_on_the_target_and_in_the_truth():
    view = torch.arange(20.0)[5:15]
    moved = to_device((view, (), {}), "cpu")[0]
    truth = upcast((view, (), {}), torch.float32)[0]
    for copy in (moved, truth):
        assert copy.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()
        assert torch.equal(torch.as_strided(copy, (2, 2), (1, 2), 0).float(), torch.tensor([[0.0, 2], [1, 3]]))
    assert (moved.storage_offset(), moved.stride()) == (5, (1,))


def test_the_truth_is_a_copy_whatever_the_dtype():
    x, index = torch.randn(4), torch.tensor([0, 1])
    truth = upcast((x, (index,), {}), torch.float32)
    assert all(t.untyped_storage().data_ptr() != s.untyped_storage().data_ptr()
               for t, s in ((truth[0], x), (truth[1][0], index)))
    assert upcast((x.double(), (), {}), torch.float64) is None  # float64 is its own truth


def test_as_strided_partial_views_come_out_clean(ops):
    for _, result in _run(ops, "as_strided.partial_views", torch.float32, n=8):
        assert result["status"] == PASS, result["reason"]


# --- a tolerance that cannot be gamed -------------------------------------------------

TRIVIAL_CASES = [("linalg.pinv", torch.complex128), ("linalg.pinv", torch.float32),
                 ("linalg.lstsq", torch.float64), ("linalg.eig", torch.float64),
                 ("linalg.solve", torch.float32), ("sin", torch.float32), ("exp", torch.float16),
                 ("mul", torch.bfloat16)]


def _far_apart(a, b):
    """Whether two outputs differ by more than 1e-2 somewhere (so one is wrong)."""
    la, lb = (torch.utils._pytree.tree_flatten(x)[0] for x in (a, b))
    return any(isinstance(x, torch.Tensor) and x.shape == y.shape and x.numel()
               and bool(((x.to(torch.complex128) - y.to(torch.complex128)).abs() > 1e-2).any())
               for x, y in zip(la, lb))


@pytest.mark.parametrize("kind", ["zeros", "input"])
def test_a_target_answering_zeros_or_the_input_is_a_mismatch(ops, kind):
    judged = 0
    target = WrongTarget(kind)
    for key, dtype in TRIVIAL_CASES:
        for sample, result in _run(ops, key, dtype, target, n=4):
            args = (sample.input.clone(), *sample.args)
            expected = ops[key].op(*args, **sample.kwargs)
            with target.context():
                answered = ops[key].op(*args, **sample.kwargs)
            if not _far_apart(answered, expected):
                continue  # the trivial answer is right for this sample (zeros where zeros are due)
            assert result["status"] == MISMATCH, (key, dtype, result["reason"])
            judged += 1
            if kind == "zeros":
                assert result["reason_kind"] in (KIND["trivial_answer"], KIND["nonfinite"]), result
    assert judged >= 15


def test_svd_with_a_target_answering_zeros_is_a_mismatch():
    a = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1))
    result = run_case(torch.linalg.svd, torch.float32, SampleInput(a, kwargs={"full_matrices": False}),
                      WrongTarget("zeros"), timing=False, op_key="linalg.svd")
    assert result["status"] == MISMATCH and result["reason_kind"] == KIND["trivial_answer"], result


def test_the_cpus_own_error_widens_the_allowance_only_up_to_the_cap():
    from mpsprobe.engine.verdict import cap, compare, floors
    truth = torch.tensor([1.0, 2.0], dtype=torch.float64)
    cpu = torch.tensor([1.5, 2.0], dtype=torch.float32)  # the CPU is far off here
    atol, rtol = floors(torch.float32)
    beyond_cap = (truth + 1.5 * cap(torch.float32) * (atol + rtol * truth)).float()
    verdict = compare(beyond_cap, cpu, truth, torch.float32)
    assert verdict.ok and verdict.undecided  # ill-conditioned: neither pass nor mismatch
    assert not compare(torch.tensor([9.0, 2.0]), cpu, truth, torch.float32).ok


# --- skips only where a sample has no unique answer ------------------------------------

def test_sort_indices_under_ties_are_checked_by_what_they_point_at():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0], [1.0, 1.0, 0.0, 5.0]])
    result = run_case(torch.argsort, torch.float32, SampleInput(x, args=(1,)), CPU, timing=False,
                      op_key="argsort")
    assert result["status"] == PASS and result["check_kind"] == "values"
    calls = []

    def wrong_on_target(inp, dim):
        calls.append(1)
        order = torch.argsort(inp, dim)
        return order.flip(dim) if len(calls) == 4 else order  # reference, truth, record, target
    result = run_case(wrong_on_target, torch.float32, SampleInput(x, args=(1,)), CPU, timing=False,
                      op_key="argsort")
    assert result["status"] == MISMATCH, result


def test_dropout_is_a_value_check_when_deterministic_and_a_distribution_check_when_random(ops):
    dropout = torch.nn.functional.dropout
    x = torch.randn(64, 64)
    for kwargs in ({"p": 0.0}, {"p": 0.5, "training": False}):
        result = run_case(dropout, torch.float32, SampleInput(x, kwargs=kwargs), CPU, timing=False,
                          op_key="nn.functional.dropout")
        assert (result["status"], result["check_kind"]) == (PASS, "values"), result
    result = run_case(dropout, torch.float32, SampleInput(x, kwargs={"p": 0.3}), CPU, timing=False,
                      op_key="nn.functional.dropout")
    assert (result["status"], result["check_kind"], result["reason_kind"]) == (
        PASS, "distribution", KIND["distribution"]), result
    assert result["duration_s"] < 2
    zeroed = run_case(dropout, torch.float32, SampleInput(x, kwargs={"p": 0.3}), WrongTarget("zeros"),
                      timing=False, op_key="nn.functional.dropout")
    assert (zeroed["status"], zeroed["check_kind"]) == (MISMATCH, "distribution"), zeroed
    for _, result in _run(ops, "native_dropout_backward", torch.float32):
        assert (result["status"], result["check_kind"]) == (PASS, "values"), result


@pytest.mark.parametrize("key", ["linalg.eigh", "linalg.eig", "linalg.svd", "svd"])
def test_vectors_in_another_phase_pass_and_wrong_vectors_do_not(key):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 5, 5, dtype=torch.complex128, generator=g)
    if key == "linalg.eigh":
        a = a + a.mH
    op = {"linalg.eigh": torch.linalg.eigh, "linalg.eig": torch.linalg.eig,
          "linalg.svd": torch.linalg.svd, "svd": torch.svd}[key]
    result = run_case(op, torch.complex128, SampleInput(a), WrongTarget("phase"), timing=False, op_key=key)
    assert (result["status"], result["check_kind"]) == (PASS, "values"), result
    result = run_case(op, torch.complex128, SampleInput(a), WrongTarget("input"), timing=False, op_key=key)
    assert result["status"] == MISMATCH, result


def test_repeated_eigenvalues_leave_the_vectors_to_the_reconstruction():
    q = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))[0]
    a = (q @ torch.diag(torch.tensor([1.0, 1.0, 2.0, 3.0], dtype=torch.float64)) @ q.mT).float()
    result = run_case(torch.linalg.eigh, torch.float32, SampleInput(a), WrongTarget("phase"), timing=False,
                      op_key="linalg.eigh")
    assert (result["status"], result["check_kind"]) == (PASS, "values"), result
    assert any("repeated" in note for note in result["notes"]["verdict"])


def _on_target(reference, target):
    """An op that is `reference` on its first three calls (CPU, float64 truth, aten record),
    then `target`: for samples of a dtype narrower than float64."""
    calls = []

    def op(*args):
        calls.append(1)
        return (target if len(calls) == 4 else reference)(*args)
    return op


def test_scatter_positions_written_twice_are_left_out_and_the_rest_still_judged():
    x, index = torch.zeros(3, 4), torch.tensor([[0, 0, 0, 0], [0, 1, 1, 1]])
    sample = SampleInput(x, args=(0, index, torch.arange(8.0).reshape(2, 4)))
    other_write_wins = _on_target(torch.scatter, lambda inp, d, i, v: torch.scatter(inp, d, i.flip(0), v.flip(0)))
    result = run_case(other_write_wins, torch.float32, sample, CPU, timing=False, op_key="scatter")
    assert result["status"] == PASS and "written more than once" in result["notes"]["verdict"][0], result
    wrong = torch.tensor([[0, 2, 0, 0], [0, 1, 1, 1]])  # a position written once, to the wrong row
    wrong_row = _on_target(torch.scatter, lambda inp, d, i, v: torch.scatter(inp, d, wrong, v))
    result = run_case(wrong_row, torch.float32, sample, CPU, timing=False, op_key="scatter")
    assert result["status"] == MISMATCH, result


def test_eigenvalues_in_another_order_pass_and_wrong_ones_do_not():
    a = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(6))

    def reversed_eig(x):
        w, v = torch.linalg.eig(x)
        return w.flip(-1), v.flip(-1)
    result = run_case(_on_target(torch.linalg.eig, reversed_eig), torch.float32, SampleInput(a), CPU,
                      timing=False, op_key="linalg.eig")
    assert result["status"] == PASS, result
    unmatched = run_case(_on_target(torch.linalg.eig, reversed_eig), torch.float32, SampleInput(a), CPU,
                         timing=False, op_key="eig without a promise")
    assert unmatched["status"] == MISMATCH  # so the order did differ
    scaled = _on_target(torch.linalg.eigvals, lambda x: torch.linalg.eigvals(x).flip(-1) * 1.01)
    result = run_case(scaled, torch.float32, SampleInput(a), CPU, timing=False, op_key="linalg.eigvals")
    assert result["status"] == MISMATCH, result


@pytest.mark.parametrize("key", ["linalg.eigvals", "linalg.eig", "linalg.eigh", "linalg.svd"])
def test_empty_matrices_of_the_vector_ops_are_judged_not_skipped(key):
    op = {"linalg.eigvals": torch.linalg.eigvals, "linalg.eig": torch.linalg.eig,
          "linalg.eigh": torch.linalg.eigh, "linalg.svd": torch.linalg.svd}[key]
    for shape in ((5, 0, 0), (0, 3, 3)):
        result = run_case(op, torch.float32, SampleInput(torch.zeros(shape)), CPU, timing=False, op_key=key)
        assert (result["status"], result["check_kind"]) == (PASS, "values"), (shape, result)


def test_a_derived_allowance_admits_no_trivially_wrong_answer():
    from mpsprobe.engine import precision
    from mpsprobe.engine.verdict import compare
    truth = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64)
    cpu = truth.float()
    loose = {0: (precision.Applicable(precision.MODES["fp32_any_order"], "aten::mm", 10), torch.full((3,), 10.0))}
    zeros = compare(torch.zeros(3), cpu, truth, torch.float32, modes=loose)
    assert not zeros.ok and zeros.reason_kind == KIND["trivial_answer"], zeros
    near = compare(cpu + 0.5, cpu, truth, torch.float32, modes=loose)  # neither the CPU nor a guess
    assert near.ok and near.undecided, near
    assert compare(cpu, cpu, truth, torch.float32, modes=loose).ok  # the CPU's own answer still passes


def test_an_ill_conditioned_matmul_is_decided_by_the_error_of_any_summation_order(ops):
    results = [r for _, r in _run(ops, "addbmm", torch.bfloat16)]
    assert all(r["status"] != MISMATCH for r in results), results
    assert any((r["status"], r["reason_kind"]) == (PASS, KIND["summation_order"]) for r in results), results


def test_in_place_matmuls_belong_to_their_family(ops):
    from mpsprobe.engine import precision
    from mpsprobe.engine.variants import run_variant_case
    from mpsprobe.vocabulary import INPLACE
    assert precision.family_of("aten::addmm_") == precision.family_of("aten::addmm") == precision.MATMUL
    assert precision.reduction_length("aten::addbmm_", [(3, 4), (2, 3, 7), (2, 7, 4)]) == 7
    assert precision.family_of("aten::add_") is None
    op = ops["addbmm"]
    results = [run_variant_case(op.inplace_variant, INPLACE, torch.bfloat16, s, CPU, "addbmm", timing=False)
               for s in opinfo.samples(op, torch.bfloat16, 3)]
    assert all(r["status"] != MISMATCH for r in results), results
    assert any(r["reason_kind"] == KIND["summation_order"] for r in results), results


def test_zeros_just_beyond_the_floors_are_not_passed_on_the_cpus_error():
    from mpsprobe.engine.verdict import compare
    truth = torch.tensor([3e-5, -3e-5, 2e-5], dtype=torch.float64)  # zeros: 2-3x the float32 floors off
    cpu = (truth + 0.8e-5).float()                                  # the CPU 0.8x the floors off: allowance 4x
    zeros = compare(torch.zeros(3), cpu, truth, torch.float32)
    assert zeros.ok and zeros.undecided, zeros  # never a pass; within 5x the floors, no mismatch either
    assert compare(cpu, cpu, truth, torch.float32).ok
    near = compare((truth - 0.5e-5).float(), cpu, truth, torch.float32)  # right, but not the CPU's answer
    assert near.ok and near.undecided, near
