"""Samples with more than one right answer, judged by what is unique (test-only targets
that answer differently but validly): no mismatch on a device that works."""
import sys
from pathlib import Path

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from mpsprobe.engine import distributions as D
from mpsprobe.engine.execute import run_case
from mpsprobe.vocabulary import MISMATCH, PASS, REASON_KINDS, SKIP

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

NO_UNIQUE_ANSWER = dict(zip(REASON_KINDS, REASON_KINDS))["no_unique_answer"]
F = torch.nn.functional


def _seeded(fn):
    """As an OpInfo's op: the same seed on every call, so CPU and CPU agree."""
    def call(*args, **kwargs):
        torch.manual_seed(42)
        return fn(*args, **kwargs)
    return call


def _attention_samples(dtype, p, training=True):
    g = torch.Generator().manual_seed(3)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)
    sdpa = SampleInput(r(4, 3, 8), args=(r(4, 6, 8), r(4, 6, 8)), kwargs={"is_causal": True, "dropout_p": p})
    e = 2
    mha = SampleInput(r(3, 2), args=(r(3, 2), r(3, 2), e, 1, r(3 * e, e), r(3 * e), r(e), r(e), False, p,
                                     r(e, e), r(e)),
                      kwargs={"q_proj_weight": None, "k_proj_weight": None, "v_proj_weight": None,
                              "attn_mask": None, "training": training, "use_separate_proj_weight": False})
    return [("nn.functional.scaled_dot_product_attention", F.scaled_dot_product_attention, sdpa),
            ("nn.functional.multi_head_attention_forward", F.multi_head_attention_forward, mha)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_inside_an_op_is_random_and_not_judged_by_value(dtype):
    for key, fn, sample in _attention_samples(dtype, 0.5):
        result = run_case(_seeded(fn), dtype, sample, WrongTarget("redraw"), timing=False, op_key=key)
        assert (result["status"], result["reason_kind"]) == (SKIP, NO_UNIQUE_ANSWER), (key, result["reason"])
        assert "dropout" in result["reason"]
        # the target's draws really differ: by value it would be called wrong
        plain = run_case(_seeded(fn), dtype, sample, WrongTarget("redraw"), timing=False)
        assert plain["status"] == MISMATCH, key


def test_dropout_off_is_still_judged_by_value():
    for p, training in ((0.0, True), (0.5, False)):
        for key, fn, sample in _attention_samples(torch.float64, p, training):
            if key.endswith("scaled_dot_product_attention") and not training:
                continue  # sdpa has no training flag: p > 0 always drops
            result = run_case(_seeded(fn), torch.float64, sample, WrongTarget("zeros"), timing=False, op_key=key)
            assert result["status"] == MISMATCH, (key, p, training)
            result = run_case(_seeded(fn), torch.float64, sample, WrongTarget("redraw"), timing=False, op_key=key)
            assert result["status"] == PASS, (key, p, training, result["reason"])


def test_the_dropout_decision_reads_the_ops_own_parameters():
    x = torch.ones(2, 3, 4)
    sdpa = "nn.functional.scaled_dot_product_attention"
    assert D.is_random_sample(sdpa, D.sample_params(sdpa, x, (x, x), {"dropout_p": 0.1}))
    assert not D.is_random_sample(sdpa, D.sample_params(sdpa, x, (x, x), {}))
    assert not D.is_random_sample(sdpa, D.sample_params(sdpa, x, (x, x, None, 0.0)))
    assert D.is_random_sample(sdpa, D.sample_params(sdpa, x, (x, x, None, 0.2)))  # positional
    flash = "torch.ops.aten._flash_attention_forward"
    assert D.is_random_sample(flash, D.sample_params(flash, x, (x, x, None, None, 3, 3, 0.5, False, False)))
    # a `p` that is no dropout probability, and ops without one, are no draws
    assert not D.is_random_sample("norm", D.sample_params("norm", x, (2,)))
    assert not D.is_random_sample("cumsum", D.sample_params("cumsum", x, (1,)))
    assert not D.is_random_sample("no.such.op", D.sample_params("no.such.op", x))


def _vector_cases():
    g = torch.Generator().manual_seed(11)
    a = torch.randn(5, 5, dtype=torch.complex128, generator=g)
    h = a + a.mH
    b = torch.randn(3, 2, dtype=torch.float64, generator=g)
    c = torch.randn(3, 2, dtype=torch.float64, generator=g)
    from torch.testing._internal.common_methods_invocations import op_db
    lowrank = {o.name: o for o in op_db if o.name in ("svd_lowrank", "pca_lowrank")}
    return [("linalg.eigh", torch.linalg.eigh, torch.complex128, SampleInput(h, kwargs={"UPLO": "U"})),
            ("linalg.eigh", torch.linalg.eigh, torch.float64, SampleInput(h.real.clone())),
            ("linalg.eig", torch.linalg.eig, torch.float64, SampleInput(a.real.clone())),
            ("svd_lowrank", lowrank["svd_lowrank"], torch.float64, SampleInput(b, args=(c,), kwargs={"q": 2})),
            ("pca_lowrank", lowrank["pca_lowrank"], torch.float64,
             SampleInput(b, args=(c,), kwargs={"q": 2, "center": False}))]


@pytest.mark.parametrize("key,op,dtype,sample", _vector_cases(), ids=[c[0] for c in _vector_cases()])
def test_vectors_that_cannot_be_put_in_canonical_form_are_never_compared_as_they_stand(key, op, dtype, sample,
                                                                                     monkeypatch):
    """Turning the target's vectors to the CPU's phases may fail where the target's outputs
    live elsewhere (a GPU): the vectors are then not unique as they stand, and never a mismatch."""
    from mpsprobe.engine import ambiguity
    real = ambiguity.canonical
    calls = []

    def failing_for_the_target(op_key, out, cpu_out, dtype):
        calls.append(op_key)
        if len(calls) == 1:  # the target's outputs come first
            raise RuntimeError("Expected all tensors to be on the same device")
        return real(op_key, out, cpu_out, dtype)
    monkeypatch.setattr(ambiguity, "canonical", failing_for_the_target)
    result = run_case(op, dtype, sample, WrongTarget("phase"), timing=False, op_key=key)
    assert result["status"] != MISMATCH, result["reason"]
    assert (result["status"], result["reason_kind"]) == (SKIP, NO_UNIQUE_ANSWER), result["reason"]
    if key != "linalg.eig":  # eigenvalues (unordered for eig) and singular values are still compared
        calls.clear()
        assert run_case(op, dtype, sample, WrongTarget("zeros"), timing=False, op_key=key)["status"] == MISMATCH
    monkeypatch.setattr(ambiguity, "canonical", real)
    assert run_case(op, dtype, sample, WrongTarget("phase"), timing=False, op_key=key)["status"] == PASS
    assert run_case(op, dtype, sample, WrongTarget("zeros"), timing=False, op_key=key)["status"] == MISMATCH


def _cumsum_sample():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(5, 5, 5, generator=g, dtype=torch.float64) * 18 - 9).to(torch.float16)
    x[:, :, 0] = torch.tensor([10.0, -10.0, 0.0049, 0.0, 0.0], dtype=torch.float16)  # cancellation along dim 1
    return SampleInput(x, args=(1,))


def test_a_half_precision_sum_in_another_order_passes_within_its_derived_error(monkeypatch):
    from mpsprobe.engine import judge
    sample = _cumsum_sample()
    result = run_case(torch.cumsum, torch.float16, sample, WrongTarget("reorder"), timing=False, op_key="cumsum")
    assert result["status"] == PASS, result["reason"]
    assert result["precision_mode"] == "fp16_summation"
    # wrong answers stay wrong: terms rounded to 5 bits, zeros
    for kind in ("coarse_sum", "zeros"):
        wrong = run_case(torch.cumsum, torch.float16, sample, WrongTarget(kind), timing=False, op_key="cumsum")
        assert wrong["status"] == MISMATCH, kind
    # without the summation's allowance the other order was called wrong
    monkeypatch.setattr(judge, "summation_allowance", lambda *a: {})
    plain = run_case(torch.cumsum, torch.float16, sample, WrongTarget("reorder"), timing=False, op_key="cumsum")
    assert plain["status"] == MISMATCH, plain["reason"]


def test_the_summation_allowance_reaches_sums_and_scans_in_half_precision_only():
    from mpsprobe.engine import judge
    x = torch.randn(4, 6).to(torch.float16)
    assert judge.summation_allowance(torch.cumsum, (x, (1,), {}), torch.float16, ["aten::cumsum"], x.cumsum(1))
    assert not judge.summation_allowance(torch.cumsum, (x.float(), (1,), {}), torch.float32, ["aten::cumsum"],
                                         x.float().cumsum(1))
    assert not judge.summation_allowance(torch.cumprod, (x, (1,), {}), torch.float16, ["aten::cumprod"], x.cumprod(1))
    assert not judge.summation_allowance(torch.sub, (x, (x,), {}), torch.float16, ["aten::sub.Tensor"], x - x)


def test_outputs_already_on_the_cpu_keep_their_types():
    """broadcast_shapes returns a torch.Size: moving nothing must not rebuild it as a tuple
    (a false 'output structure differs' on a GPU)."""
    import torch
    from mpsprobe.engine.judge import _on_cpu

    size = torch.Size([2, 3])
    assert _on_cpu(size) is size
    pair = (torch.ones(1), size)
    assert _on_cpu(pair) is pair


def _weight_gradient_sample(integers=False):
    """convolution_backward as a model's replay calls it: 3x3, stride 1, padding 1, all three gradients."""
    g = torch.Generator().manual_seed(3)
    if integers:  # every product and sum exact in float32: the CPU's own error is nil
        x, go = (torch.randint(-8, 9, shape, generator=g).float() for shape in ((2, 8, 16, 16), (2, 8, 16, 16)))
    else:
        x, go = torch.randn(2, 8, 16, 16, generator=g), torch.randn(2, 8, 16, 16, generator=g)
    w = torch.randn(8, 8, 3, 3, generator=g)
    return SampleInput(go, args=(x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]))


_CONV_BACKWARD = torch.ops.aten.convolution_backward.default


def _weight_case(kind, integers=False):
    return run_case(_CONV_BACKWARD, torch.float32, _weight_gradient_sample(integers), WrongTarget(kind),
                    timing=False, op_key="aten::convolution_backward")


@pytest.mark.parametrize("kind,integers", [("winograd_wgrad", False), ("winograd_wgrad", True),
                                           ("fft_wgrad", True)])
def test_a_weight_gradient_by_a_transformed_algorithm_passes_within_any_summation_order(
        monkeypatch, kind, integers):
    """cuDNN picks Winograd or FFT algorithms by its heuristics, TF32 or not: their rounding
    is not the CPU's, and it is no mismatch."""
    from mpsprobe.engine import judge
    from mpsprobe.vocabulary import REASON_KIND
    result = _weight_case(kind, integers)
    assert (result["status"], result["reason_kind"]) == (PASS, "summation_order"), result["reason"]
    assert "summation_order" in REASON_KIND
    assert result["precision_mode"] == "fp32_any_order"
    assert "any order" in result["reason"]
    # the CPU's own error did not cover it: without the rule, a false mismatch
    monkeypatch.setattr(judge, "order_allowance", lambda *a: {})
    plain = _weight_case(kind, integers)
    assert plain["status"] == MISMATCH and "output 1" in plain["reason"], plain["reason"]


@pytest.mark.parametrize("kind", ["wgrad_off", "wgrad_dropped", "zeros"])
@pytest.mark.parametrize("integers", [False, True])
def test_a_wrong_weight_gradient_is_still_a_mismatch(kind, integers):
    result = _weight_case(kind, integers)
    assert result["status"] == MISMATCH, result["reason"]
    assert result["reason_kind"] in ("values", "trivial_answer")
    if kind != "zeros":
        assert "beyond even the error of float32 summation in any order" in result["reason"]


def test_the_order_allowance_reaches_matmuls_and_convolutions_only():
    from mpsprobe.engine import judge
    a, b = torch.randn(6, 40), torch.randn(40, 5)
    allowed = judge.order_allowance(torch.mm, (a, (b,), {}), torch.float32, ["aten::mm"], a @ b)
    applicable, bound = allowed[0]
    assert applicable.reduction_length == 40 and bound.shape == (6, 5)
    # the bound follows the magnitudes of each output's own terms
    assert torch.allclose(bound / bound.max(), (a.abs().double() @ b.abs().double()).div(
        (a.abs().double() @ b.abs().double()).max()), rtol=1e-3)
    assert not judge.order_allowance(torch.sin, (a, (), {}), torch.float32, ["aten::sin"], a.sin())
    assert not judge.order_allowance(torch.mm, (a, (b,), {}), torch.float32, ["aten::mm", "aten::exp"], a @ b)


@pytest.mark.parametrize("kind,status", [("winograd_wgrad", PASS), ("wgrad_off", MISMATCH),
                                         ("wgrad_dropped", MISMATCH)])
def test_a_convolutions_backward_case_allows_any_summation_order_of_its_weight_gradient(
        monkeypatch, one_cpu_thread, kind, status):
    """On one CPU thread the CPU's own error in this weight gradient is below Winograd's
    rounding (on two or more, oneDNN's split sum errs enough to cover it)."""
    from mpsprobe.engine import judge
    from mpsprobe.engine.backward import run_backward_case
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(2, 8, 16, 16, generator=g), torch.randn(8, 8, 3, 3, generator=g)
    sample = SampleInput(x.requires_grad_(), args=(w.requires_grad_(),), kwargs={"padding": 1})
    result = run_backward_case(F.conv2d, torch.float32, sample, WrongTarget(kind), "nn.functional.conv2d",
                               timing=False)
    assert result["status"] == status, result["reason"]
    if status == PASS:
        assert (result["reason_kind"], result["precision_mode"]) == ("summation_order", "fp32_any_order")
        monkeypatch.setattr(judge, "gradient_order_allowance", lambda *a: {})
        plain = run_backward_case(F.conv2d, torch.float32, sample, WrongTarget(kind), "nn.functional.conv2d",
                                  timing=False)
        assert plain["status"] == MISMATCH, plain["reason"]  # beyond the CPU's own error
    else:
        assert "gradient 1" in result["reason"]


@pytest.mark.parametrize("kind", ["winograd_wgrad", "wgrad_off"])
@pytest.mark.slow
def test_check_run_answers_a_transformed_weight_gradient_and_a_wrong_one(tmp_path, run_cli, kind):
    """The model check as on a GPU whose cuDNN picks Winograd for the weight gradient: the
    report says working, and which allowance it took; a wrong weight gradient stays ≠."""
    backend = str(Path(__file__).parent / "wrong_backend.py")
    convnet = str(Path(__file__).parent / "models" / "convnet.py")
    result = run_cli("check", convnet, "--train", "--run", "--backend", backend, "--no-timing",
                     "--db", tmp_path / f"{kind}.db", env={"WRONG": kind})
    line = next(x for x in result.output.splitlines() if x.split()[1:2] == ["aten::convolution_backward"])
    if kind == "winograd_wgrad":
        assert result.exit_code == 0, result.output
        assert line.startswith("✓") and "within the error of float32 summation in any order" in line
    else:
        assert result.exit_code == 1 and line.startswith("≠"), result.output


def _decomposition_outputs(ulps_of_norm):
    """linalg.svd of a float32 matrix of norm ~100 with small elements: the CPU's
    answer, the float64 truth, and a target whose U is off by `ulps_of_norm` float32
    epsilons (vectors O(1)), so its rebuilt matrix is off by about that times |A|."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(4, 4, dtype=torch.float64, generator=g) * 0.5
    a[0, 0] = 100.0
    cpu = torch.linalg.svd(a.float())
    truth = torch.linalg.svd(a.float().double())
    u, s, vh = cpu
    nudge = torch.randn(u.shape, generator=g).float() * torch.finfo(torch.float32).eps * ulps_of_norm
    return (u + nudge, s, vh), cpu, truth


def test_a_decompositions_rebuilt_matrix_is_judged_relative_to_the_matrixs_norm():
    """A backward-stable decomposition promises |USVh - A| <= n·eps·|A|, not the last
    digits of each small element: a target within a few epsilons of the norm passes,
    one off by a thousandth of the norm does not."""
    from mpsprobe.engine import ambiguity
    from mpsprobe.engine.verdict import compare

    def verdict(ulps):
        target, cpu, truth = _decomposition_outputs(ulps)
        canon = [ambiguity.canonical("linalg.svd", out, cpu, torch.float32)[0] for out in (target, cpu, truth)]
        return compare(*canon, torch.float32)
    target, cpu, truth = _decomposition_outputs(8)
    rebuilt = target[0] @ torch.diag_embed(target[1]) @ target[2]
    exact = truth[0] @ torch.diag_embed(truth[1]) @ truth[2]
    small = exact.abs() < 1
    # elementwise, a small element of the rebuilt matrix is beyond the float32 floors ...
    assert ((rebuilt.double() - exact).abs()[small] > 1e-5 + 1.3e-6 * exact.abs()[small]).any()
    assert verdict(8).ok, verdict(8).reason        # ... but within eps·|A|: a pass
    wrong = verdict(2e4)                            # a thousandth of |A|: a mismatch
    assert not wrong.ok and not wrong.undecided
