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
