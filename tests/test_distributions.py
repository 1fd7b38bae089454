"""Distribution checks: silent on correct torch CPU draws over many seeds, loud on real bugs."""
import functools
import itertools

import pytest
import torch

from mpsprobe.engine import distributions as D
from mpsprobe.vocabulary import MISMATCH, PASS

# dropout2d warns about 3-D inputs; the OpInfo samples use them on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N = 512           # values per check here: small, so 200 seeds run fast
SEEDS = range(200)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _correct(family, g):
    """(check, params, draw) for a correct CPU generator seeded by `g`."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(99)) * 3
    if family in ("dropout", "dropout2d", "alpha_dropout", "rrelu"):
        torch.manual_seed(int(torch.randint(0, 2 ** 62, (), generator=g)))
    probs = torch.tensor([[0.0, 1.0, 2.0, 3.0], [5.0, 1.0, 0.0, 1.0]])
    table = {
        "normal": (D.check_normal, {"mean": 2.0, "std": 0.5},
                   lambda: torch.empty(256).normal_(2.0, 0.5, generator=g)),
        "normal_tensor": (D.check_normal, {"mean": torch.arange(8.0), "std": torch.linspace(0.1, 3, 8)},
                          lambda: torch.normal(torch.arange(8.0).expand(32, 8), torch.linspace(0.1, 3, 8).expand(32, 8),
                                               generator=g)),
        "randn_half": (D.check_normal, {}, lambda: torch.randn(256, generator=g).half()),
        "randn_complex": (D.check_normal, {}, lambda: torch.randn(128, dtype=torch.complex64, generator=g)),
        "uniform": (D.check_uniform, {"low": -3.0, "high": 5.0},
                    lambda: torch.empty(256).uniform_(-3, 5, generator=g)),
        "rand_bf16": (D.check_uniform, {}, lambda: torch.rand(256, generator=g).bfloat16()),
        "exponential": (D.check_exponential, {"lambd": 1.5},
                        lambda: torch.empty(256).exponential_(1.5, generator=g)),
        "cauchy": (D.check_cauchy, {"median": -2.0, "sigma": 0.5},
                   lambda: torch.empty(256).cauchy_(-2.0, 0.5, generator=g)),
        "log_normal": (D.check_log_normal, {"mean": 0.5, "std": 0.75},
                       lambda: torch.empty(256).log_normal_(0.5, 0.75, generator=g)),
        "geometric": (D.check_geometric, {"p": 0.3}, lambda: torch.empty(256).geometric_(0.3, generator=g)),
        "bernoulli": (D.check_bernoulli, {"p": torch.linspace(0, 1, 64)},
                      lambda: torch.bernoulli(torch.linspace(0, 1, 64), generator=g)),
        "randint": (D.check_randint, {"low": 2, "high": 9}, lambda: torch.randint(2, 9, (256,), generator=g)),
        "randperm": (D.check_randperm, {}, lambda: torch.randperm(12, generator=g)),
        "multinomial": (D.check_multinomial, {"probs": probs, "replacement": True},
                        lambda: torch.multinomial(probs, 16, replacement=True, generator=g)),
        "multinomial_noreplace": (D.check_multinomial, {"probs": probs.repeat(8, 1), "replacement": False},
                                  lambda: torch.multinomial(probs.repeat(8, 1), 2, replacement=False, generator=g)),
        "dropout": (D.check_dropout, {"input": x, "p": 0.3},
                    lambda: _with_seed(g, lambda: torch.nn.functional.dropout(x, 0.3))),
        "dropout2d": (D.check_dropout, {"input": x[None, :, :, None].expand(2, 4, 8, 3), "p": 0.5},
                      lambda: _with_seed(g, lambda: torch.nn.functional.dropout2d(
                          x[None, :, :, None].expand(2, 4, 8, 3), 0.5))),
        "alpha_dropout": (D.check_alpha_dropout, {"input": x, "p": 0.5},
                          lambda: _with_seed(g, lambda: torch.nn.functional.alpha_dropout(x, 0.5, True))),
        "rrelu": (D.check_rrelu, {"input": x, "lower": 0.1, "upper": 0.4},
                  lambda: _with_seed(g, lambda: torch.nn.functional.rrelu(x, 0.1, 0.4, training=True))),
    }
    check, params, draw = table[family]
    if family == "dropout2d":
        check = lambda p, d, **kw: D.check_dropout(p, d, op_name="nn.functional.dropout2d", **kw)  # noqa: E731
    return check, params, draw


def _with_seed(g, fn):
    return fn()  # dropout and rrelu take no generator: _correct seeded the global one from `g`


FAMILIES = ["normal", "normal_tensor", "randn_half", "randn_complex", "uniform", "rand_bf16", "exponential",
            "cauchy", "log_normal", "geometric", "bernoulli", "randint", "randperm", "multinomial",
            "multinomial_noreplace", "dropout", "dropout2d", "alpha_dropout", "rrelu"]


@pytest.mark.parametrize("family", FAMILIES)
def test_no_false_alarm_over_200_seeds(family):
    """At the stated rate (1e-6) no seed fails; at alpha = 0.05 the observed rate stays under it too:
    the bounds are conservative, never optimistic."""
    loose_failures = 0
    for seed in SEEDS:
        check, params, draw = _correct(family, _gen(seed))
        result = check(params, draw, n=N, max_calls=256)
        assert result.status == PASS, (seed, result.detail)
        assert result.reason_kind == D.DISTRIBUTION and "false-alarm rate <= 1e-06" in result.detail
    for seed in itertools.islice(SEEDS, 50):
        check, params, draw = _correct(family, _gen(10_000 + seed))
        loose_failures += check(params, draw, n=N, alpha=0.05, max_calls=256).status != PASS
    assert loose_failures <= 9  # binomial(50, 0.05) exceeds 9 with probability < 0.001


def _check(check, params, draw, **kw):
    return check(params, draw, n=8192, max_calls=512, **kw)


def _mismatch(result, test_name):
    assert result.status == MISMATCH, result.detail
    failed = result.detail.split("; ")[0].split("failed ", 1)[1]
    assert test_name in failed, result.detail


g = torch.Generator()


def test_normal_catches_wrong_mean_and_scale():
    _mismatch(_check(D.check_normal, {"mean": 0.0, "std": 1.0}, lambda: torch.randn(512, generator=g) + 0.1), "mean")
    _mismatch(_check(D.check_normal, {"mean": 0.0, "std": 1.0}, lambda: torch.randn(512, generator=g) * 1.1),
              "scale")
    # Uniform noise with the right mean and variance is not normal: only the shape test sees it.
    _mismatch(_check(D.check_normal, {}, lambda: (torch.rand(512, generator=g) - 0.5) * 12 ** 0.5), "ks")


def test_repeated_values_are_caught():
    shape = (512,)
    every_element_same = lambda: torch.randn((), generator=g).expand(shape).clone()  # noqa: E731
    period_8 = lambda: torch.randn(8, generator=g).repeat(64)  # noqa: E731
    same_every_call = lambda: torch.randn(shape, generator=torch.Generator().manual_seed(42))  # noqa: E731
    for draw in (every_element_same, period_8, same_every_call):
        _mismatch(_check(D.check_normal, {}, draw), "repetition")
    _mismatch(_check(D.check_uniform, {}, lambda: torch.rand(16, generator=g).repeat(32)), "repetition")


def test_a_generator_refilling_one_tensor_in_place_is_judged_on_each_draw():
    # Draws are kept until the end of the check: each must be its own copy, or every
    # kept draw would read the last one and a correct generator would fail repetition.
    buffer = torch.empty(512)
    refilled = lambda: buffer.normal_(generator=g)  # noqa: E731
    assert _check(D.check_normal, {"mean": 0.0, "std": 1.0}, refilled).status == PASS


def test_uniform_range_and_shape():
    _mismatch(_check(D.check_uniform, {"low": 0.0, "high": 1.0}, lambda: torch.rand(512, generator=g) * 1.01),
              "in [low, high]")
    _mismatch(_check(D.check_uniform, {"low": 0.0, "high": 1.0}, lambda: torch.rand(512, generator=g) * 0.95), "ks")


def test_exponential_cauchy_log_normal_geometric_catch_wrong_parameters():
    _mismatch(_check(D.check_exponential, {"lambd": 1.0}, lambda: torch.empty(512).exponential_(1.1, generator=g)),
              "mean")
    _mismatch(_check(D.check_cauchy, {"median": 0.0, "sigma": 1.0},
                     lambda: torch.empty(512).cauchy_(0.0, 1.3, generator=g)), "count below q0.25")
    _mismatch(_check(D.check_log_normal, {"mean": 0.0, "std": 1.0},
                     lambda: torch.empty(512).log_normal_(0.0, 1.1, generator=g)), "scale")
    _mismatch(_check(D.check_geometric, {"p": 0.3}, lambda: torch.empty(512).geometric_(0.3, generator=g) - 1),
              "integers >= 1")
    _mismatch(_check(D.check_geometric, {"p": 0.3}, lambda: torch.empty(512).geometric_(0.35, generator=g)),
              "count of 1s")


def test_bernoulli_catches_wrong_p():
    p = torch.linspace(0.05, 0.95, 64)
    _mismatch(_check(D.check_bernoulli, {"p": p}, lambda: torch.bernoulli(p * 0.9, generator=g)), "ones in group")
    # 1 - p keeps the total for symmetric p's: the per-group counts still see it.
    _mismatch(_check(D.check_bernoulli, {"p": p}, lambda: torch.bernoulli(1 - p, generator=g)), "ones in group")
    _mismatch(_check(D.check_bernoulli, {"p": torch.tensor([0.0, 1.0, 0.5])},
                     lambda: torch.tensor([1.0, 1.0, float(torch.rand((), generator=g) < 0.5)])),
              "p = 0 gives 0, p = 1 gives 1")


def test_dropout_catches_wrong_p_and_unscaled_survivors():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))

    def dropout(p_used, scale):
        return lambda: x * (torch.rand(x.shape, generator=g) >= p_used) * scale

    _mismatch(_check(D.check_dropout, {"input": x, "p": 0.5}, dropout(0.45, 1 / 0.55)), "each value kept")
    _mismatch(_check(D.check_dropout, {"input": x, "p": 0.5}, dropout(0.45, 2.0)), "dropped units")
    _mismatch(_check(D.check_dropout, {"input": x, "p": 0.5}, dropout(0.5, 1.0)), "each value kept")
    assert _check(D.check_dropout, {"input": x, "p": 0.5}, dropout(0.5, 2.0)).status == PASS
    # dropout2d must drop whole channels.
    x4 = torch.randn(2, 4, 5, 5, generator=g)
    per_element = lambda: x4 * (torch.rand(x4.shape, generator=g) >= 0.5) * 2  # noqa: E731
    _mismatch(_check(D.check_dropout, {"input": x4, "p": 0.5}, per_element, op_name="nn.functional.dropout2d"),
              "one decision per unit")


def test_alpha_dropout_and_rrelu_bounds():
    x = torch.randn(64, generator=torch.Generator().manual_seed(2))
    # Plain dropout's zeros are not alpha dropout's saturation value.
    _mismatch(_check(D.check_alpha_dropout, {"input": x, "p": 0.5},
                     lambda: torch.nn.functional.dropout(x, 0.5)), "each value kept")
    too_steep = lambda: torch.where(x < 0, x * 0.5, x)  # noqa: E731
    _mismatch(_check(D.check_rrelu, {"input": x, "lower": 0.1, "upper": 0.3}, too_steep), "slopes in [lower, upper]")
    skewed = lambda: torch.where(x < 0, x * (0.1 + 0.2 * torch.rand(64, generator=g) ** 2), x)  # noqa: E731
    _mismatch(_check(D.check_rrelu, {"input": x, "lower": 0.1, "upper": 0.3}, skewed), "slopes uniform")


def test_randperm_randint_multinomial_hard_bugs():
    def duplicated():
        perm = torch.randperm(10, generator=g)
        perm[perm == 3] = 4
        return perm

    _mismatch(_check(D.check_randperm, {}, duplicated), "a permutation")
    _mismatch(_check(D.check_randperm, {}, lambda: torch.arange(10)), "first element uniform")
    _mismatch(_check(D.check_randint, {"low": 0, "high": 10}, lambda: torch.randint(0, 11, (64,), generator=g)),
              "integers in [low, high)")
    _mismatch(_check(D.check_randint, {"low": 0, "high": 10}, lambda: torch.randint(0, 9, (64,), generator=g)), "ks")
    probs = torch.tensor([0.0, 1.0, 1.0, 2.0])
    leaky = torch.tensor([0.01, 1.0, 1.0, 2.0])
    _mismatch(_check(D.check_multinomial, {"probs": probs, "replacement": True},
                     lambda: torch.multinomial(leaky, 8, replacement=True, generator=g)), "no zero-probability")
    _mismatch(_check(D.check_multinomial, {"probs": probs, "replacement": False},
                     lambda: torch.multinomial(probs, 2, replacement=True, generator=g)), "no repeats")
    _mismatch(_check(D.check_multinomial, {"probs": probs, "replacement": True},
                     lambda: torch.multinomial(torch.tensor([0.0, 1.0, 1.5, 1.5]), 8, True, generator=g)),
              "row 0 category")


def test_table_names_are_opinfo_names_and_samples_decide_randomness():
    from torch.testing._internal.common_methods_invocations import op_db
    keys = {o.name + (f".{o.variant_test_name}" if o.variant_test_name else "") for o in op_db}
    assert set(D.RANDOM_OPS) - keys <= {"rand", "randperm"}  # not OpInfos in every torch version
    x = torch.randn(3, 3)
    for name in ("nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.alpha_dropout"):
        assert D.is_random_sample(name, D.sample_params(name, x, (), {"p": 0.5, "training": True}))
        assert not D.is_random_sample(name, D.sample_params(name, x, (), {"p": 0.0, "training": True}))
        assert not D.is_random_sample(name, D.sample_params(name, x, (), {"p": 1.0, "training": True}))
        assert not D.is_random_sample(name, D.sample_params(name, x, (), {"p": 0.5, "training": False}))
    assert not D.is_random_sample("nn.functional.alpha_dropout", D.sample_params("nn.functional.alpha_dropout", x))
    assert not D.is_random_sample("nn.functional.rrelu", D.sample_params("nn.functional.rrelu", x))  # eval mode
    assert D.is_random_sample("nn.functional.rrelu", D.sample_params("nn.functional.rrelu", x, (), {"training": True}))
    assert not D.is_random_sample("bernoulli", D.sample_params("bernoulli", torch.tensor([0.0, 1.0])))
    assert not D.is_random_sample("bernoulli", D.sample_params("bernoulli", torch.empty(0, 3)))
    assert not D.is_random_sample("native_dropout_backward", {})
    assert D.check_kind("empty_like", {}) == D.SHAPE_CHECK
    assert D.check_kind("randn", D.sample_params("randn", (5,))) == D.DISTRIBUTION
    assert D.check_kind("randn", D.sample_params("randn", (0, 5))) == D.VALUES_CHECK


def test_opinfo_samples_pass_through_check_sample():
    """The table's parameter readers and draw callables fit the real OpInfo samples."""
    from torch.testing._internal.common_methods_invocations import op_db
    seen = set()
    for op in op_db:
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if key not in D.RANDOM_OPS:
            continue
        for sample in op.sample_inputs("cpu", torch.float32):
            params = D.sample_params(key, sample.input, sample.args, sample.kwargs)
            if D.is_random_sample(key, params):
                result = D.check_sample(key, sample.input, sample.args, sample.kwargs, n=1024, max_calls=64)
                assert result.status == PASS, (key, result.detail)
                seen.add(key)
    assert {"normal", "uniform", "bernoulli", "multinomial", "nn.functional.dropout", "nn.functional.rrelu",
            "randint", "cauchy", "geometric", "exponential", "log_normal"} <= seen


RANDOM_FORMS = ["cauchy", "exponential", "geometric", "log_normal", "normal.in_place", "uniform",
                "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.alpha_dropout",
                "nn.functional.rrelu", "bernoulli", "multinomial", "normal", "randn"]


def test_in_place_and_out_forms_of_random_ops_get_distribution_verdicts():
    from mpsprobe.engine.devices import Target
    from mpsprobe.engine.variants import out_form, run_variant_case
    from mpsprobe.ops import opinfo
    from mpsprobe.vocabulary import INPLACE, OUT
    ops = {opinfo.op_key(o): o for o in opinfo.load_op_db()}
    judged = {INPLACE: set(), OUT: set()}
    for key in RANDOM_FORMS:
        op = ops[key]
        for pass_ in opinfo.passes(op, torch.float32, (INPLACE, OUT)):
            fn = out_form(op.op) if pass_ == OUT else opinfo.variant(op, pass_)
            for sample in opinfo.samples(op, torch.float32, 3):
                result = run_variant_case(fn, pass_, torch.float32, sample, Target("cpu"), key, timing=False)
                assert result["status"] == PASS, (key, pass_, result["reason"])
                if result["check_kind"] == D.DISTRIBUTION:
                    judged[pass_].add(key)
    assert judged[INPLACE] >= {"cauchy", "uniform", "nn.functional.dropout", "nn.functional.rrelu"}, judged
    assert judged[OUT] >= {"bernoulli", "multinomial", "normal", "randn"}, judged


def test_forms_that_do_not_write_where_they_should_are_caught(monkeypatch):
    from mpsprobe.vocabulary import INPLACE, OUT
    fresh_normal = D.RandomOp(D.check_normal, lambda i, a, k: {"numel": i.numel()},
                              lambda i, a, k: torch.randn(i.shape, generator=g))  # ignores out=
    monkeypatch.setitem(D.RANDOM_OPS, "normal", fresh_normal)
    x = torch.zeros(256)
    assert D.check_sample("normal", x, n=4096, max_calls=64).status == PASS
    _mismatch(D.check_sample("normal", x, n=4096, max_calls=64, form=OUT), "finite")
    x = torch.randn(16, 32, generator=g)
    fresh_dropout = D.RandomOp(
        functools.partial(D.check_dropout, op_name="nn.functional.dropout"),
        lambda i, a, k: {"input": i, "p": 0.5, "training": True},
        lambda i, a, k: torch.nn.functional.dropout(i, 0.5))  # ignores inplace=True: the input stays
    monkeypatch.setitem(D.RANDOM_OPS, "nn.functional.dropout", fresh_dropout)
    assert D.check_sample("nn.functional.dropout", x, n=4096, max_calls=64).status == PASS
    assert D.check_sample("nn.functional.dropout", x, n=4096, max_calls=64, form=INPLACE).status == MISMATCH


def test_the_normal_quantile_refuses_rates_outside_zero_to_one():
    from mpsprobe.engine.distributions import _normal_quantile
    assert _normal_quantile(0.05) == pytest.approx(1.959963984540054, rel=1e-12)
    assert _normal_quantile(1e-6) == pytest.approx(4.891638475698, rel=1e-9)
    # The bisection answered 38.5 for a rate of 0 (a test that may never reject) and ~0 for 1.5.
    for alpha in (0.0, 1.5, -1e-3):
        with pytest.raises(ValueError, match="false-alarm rate"):
            _normal_quantile(alpha)
