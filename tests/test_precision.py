"""Precision modes: a TF32-rounded target stays within the mode's derived error; wrong answers don't."""
import pytest
import torch
import torch.nn.functional as F

from mpsprobe.engine import precision as P


def test_round_to_mantissa_matches_bfloat16_and_bounds_the_error():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 100
    assert torch.equal(P.round_to_mantissa(x, 7), x.to(torch.bfloat16).to(torch.float32))
    for bits in (10, 7):
        for truncate in (False, True):
            r = P.round_to_mantissa(x, bits, truncate)
            assert torch.all((r.view(torch.int32) & ((1 << (23 - bits)) - 1)) == 0)
            rel = ((r - x) / x).abs().max().item()
            assert rel <= 2.0 ** -(bits + (0 if truncate else 1))
    assert P.round_to_mantissa(torch.tensor([1 + 2 ** -11]), 10).item() == 1.0          # tie to even
    assert P.round_to_mantissa(torch.tensor([1 + 3 * 2 ** -11]), 10).item() == 1 + 2 ** -9
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    out = P.round_to_mantissa(special, 10)
    assert torch.isnan(out[0]) and torch.equal(out[1:], special[1:])


def _bert_matmul(seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 768, generator=g), torch.randn(768, 3072, generator=g) * 0.02
    return torch.mm, a, b, 768


def _resnet_conv(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.relu(torch.randn(2, 256, 14, 14, generator=g))
    w = torch.randn(256, 256, 3, 3, generator=g) * 0.03
    return (lambda i, k: F.conv2d(i, k, padding=1)), x, w, 256 * 3 * 3


def _ratio(fn, a, b, k, out, mode="tf32_matmul"):
    """max over outputs of |out - float64 truth| / the mode's allowance."""
    truth = fn(a.double(), b.double())
    bound = P.mode_error_bound(mode, k, outputs=truth.numel(), **P.reduction_magnitudes(fn, a, b))
    return ((out.double() - truth).abs() / bound).max().item(), truth, bound


@pytest.mark.parametrize("case", [_bert_matmul, _resnet_conv])
@pytest.mark.slow
def test_tf32_target_is_within_the_bound_over_seeds(case):
    worst = 0.0
    for seed in range(3):
        fn, a, b, k = case(seed)
        for truncate in (False, True):  # rounding and truncating conversions
            tf32 = fn(P.round_to_mantissa(a, 10, truncate), P.round_to_mantissa(b, 10, truncate))
            worst = max(worst, _ratio(fn, a, b, k, tf32)[0])
    assert worst < 0.5  # measured about 0.16 rounding, 0.30 truncating: no false alarm, with room


@pytest.mark.parametrize("case", [_bert_matmul, _resnet_conv])
def test_wrong_answers_exceed_the_bound(case):
    fn, a, b, k = case(7)
    tf32 = fn(P.round_to_mantissa(a, 10), P.round_to_mantissa(b, 10))
    _, truth, bound = _ratio(fn, a, b, k, tf32)
    # bfloat16's 7 bits where TF32's 10 were claimed
    bf16 = fn(P.round_to_mantissa(a, 7), P.round_to_mantissa(b, 7))
    assert _ratio(fn, a, b, k, bf16)[0] > 1.0
    # one element off by 1 % (where the output is largest)
    off = tf32.clone().flatten()
    i = truth.abs().flatten().argmax()
    off[i] *= 1.01
    assert _ratio(fn, a, b, k, off.view_as(tf32))[0] > 1.0
    # zeros
    assert _ratio(fn, a, b, k, torch.zeros_like(tf32))[0] > 1.0


def test_statistical_bound_holds_when_every_rounding_error_is_aligned():
    # Every input sits just below a TF32 rounding boundary: the errors all point
    # the same way, the case a naive sqrt(K) estimate gets wrong.
    k = 4096
    a = torch.full((1, k), 1 + 0.999 * 2 ** -11)
    b = torch.ones(k, 1)
    for truncate in (False, True):
        out = torch.mm(P.round_to_mantissa(a, 10, truncate), b)
        ratio, _, bound = _ratio(torch.mm, a, b, k, out)
        assert ratio <= 1.0
        assert bound.item() <= P.mode_error_bound("tf32_matmul", k, abs_sum=float(k) * 1.001).item()


def test_worst_case_bound_without_statistics_is_the_rigorous_one():
    u = 2.0 ** -11
    bound = P.mode_error_bound("tf32_matmul", 100, abs_sum=1.0)
    assert bound.item() == pytest.approx(4 * u + 4 * u * u + 100 * 2.0 ** -24)
    # float16 split-K reduction: inputs untouched, the accumulator is what loses bits
    assert P.mode_error_bound("fp16_reduction", 100, abs_sum=1.0).item() == pytest.approx(100 * 2.0 ** -11)


CUDA_DEFAULTS = {"device": "cuda", "cuda.matmul.allow_tf32": False, "cuda.matmul.fp32_precision": "none",
                 "cudnn.allow_tf32": True, "cudnn.conv.fp32_precision": "tf32", "cudnn.rnn.fp32_precision": "tf32",
                 "float32_matmul_precision": "highest",
                 "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
                 "cuda.matmul.allow_bf16_reduced_precision_reduction": True}


def test_applicable_mode_follows_ops_modes_and_dtypes():
    conv_shapes = {"aten::convolution": [(2, 256, 14, 14), (256, 256, 3, 3)]}
    hit = P.applicable_mode(["aten::convolution"], CUDA_DEFAULTS, torch.float32, conv_shapes)
    assert hit.mode.name == "tf32_cudnn" and hit.reduction_length == 2304 and hit.reason == "reduced precision: TF32"
    assert P.applicable_mode(["aten::mm"], CUDA_DEFAULTS, torch.float32) is None            # matmul TF32 off
    assert P.applicable_mode(["aten::convolution"], CUDA_DEFAULTS, torch.float64) is None    # no TF32 for float64
    assert P.applicable_mode(["aten::add.Tensor"], CUDA_DEFAULTS, torch.float32) is None
    high = {**CUDA_DEFAULTS, "float32_matmul_precision": "high"}
    hit = P.applicable_mode(["aten::addmm"], high, torch.float32, {"aten::addmm": [(8,), (4, 96), (96, 8)]})
    assert hit.mode.name == "tf32_matmul" and hit.reduction_length == 96
    assert P.applicable_mode(["aten::mm"], {**high, "float32_matmul_precision": "medium"},
                             torch.float32).mode.name == "bf16_matmul"
    assert P.applicable_mode(["aten::bmm"], CUDA_DEFAULTS, torch.float16).mode.name == "fp16_reduction"
    mps = {"device": "mps", "PYTORCH_MPS_FAST_MATH": "1"}
    assert P.applicable_mode(["aten::exp"], mps, torch.float32).mode.name == "mps_fast_math"
    assert P.applicable_mode(["aten::exp"], {"device": "mps"}, torch.float32) is None
    assert P.applicable_mode(["aten::mm"], P.current_modes("cpu"), torch.float32) is None


def test_reduction_length_from_shapes():
    assert P.reduction_length("aten::mm", [(5, 7), (7, 3)]) == 7
    assert P.reduction_length("aten::baddbmm", [(2, 5, 3), (2, 5, 7), (2, 7, 3)]) == 7
    assert P.reduction_length("aten::linear", [(4, 10), (6, 10)]) == 10
    assert P.reduction_length("aten::convolution", [(1, 8, 9, 9), (16, 4, 3, 3)], groups=2) == 36
    assert P.reduction_length("aten::convolution", [(1, 8, 9, 9), (8, 2, 3, 3)], groups=4, transposed=True) == 18
    assert P.reduction_length("aten::relu", [(3,)]) is None


def test_current_modes_and_strict_precision_restore():
    assert {"float32_matmul_precision", "cudnn.allow_tf32", "PYTORCH_MPS_FAST_MATH"} <= set(P.current_modes("cpu"))
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        before = P.current_modes("cpu")
        with P.strict_precision("cpu") as inside:
            assert inside["float32_matmul_precision"] == "highest"
            assert not P.active_modes({**inside, "device": "cuda"})  # nothing reduced left on
        assert P.current_modes("cpu") == before
    finally:
        torch.set_float32_matmul_precision(previous)


def test_any_order_bound_covers_float32_sums_in_any_order_and_is_not_the_worst_case():
    """Running sums in float32 in several orders, and a pairwise sum, of random products."""
    import numpy as np
    from mpsprobe.engine.precision import MODES, any_order_bound
    mode = MODES["fp32_any_order"]
    g = torch.Generator().manual_seed(11)
    for k in (64, 4096):
        a, b = torch.randn(k, generator=g), torch.rand(k, generator=g) + 0.5
        terms = (a * b).numpy()   # products rounded to float32, as a kernel makes them
        exact = (a.double() * b.double()).sum()
        allowed = any_order_bound(mode, k, (a.double() * b.double()).abs().sum(), exact.abs(), torch.float32)
        orders = {"forward": terms, "reverse": terms[::-1], "largest first": terms[np.argsort(-np.abs(terms))],
                  "positives first": terms[np.argsort(-terms)]}
        for name, ordered in orders.items():
            one_by_one = np.add.accumulate(ordered, dtype=np.float32)[-1]   # a running sum in float32
            assert abs(float(one_by_one) - float(exact)) <= float(allowed), (k, name)
        pairwise = torch.from_numpy(terms.copy())
        while pairwise.numel() > 1:
            pairwise = pairwise[0::2] + pairwise[1::2]
        assert abs(float(pairwise) - float(exact)) <= float(allowed)
        if k > 1000:   # for long sums the statistical bound decides, well inside the worst case
            assert float(allowed) < 0.25 * k * 2.0 ** -24 * float((a.double() * b.double()).abs().sum())
