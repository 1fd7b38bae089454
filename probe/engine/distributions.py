"""Statistical verdicts for random ops.

A random op has no value to compare with the CPU: two correct devices draw
different numbers. What it does have is a distribution, and a device that
draws from the wrong one (a wrong scale, a wrong p, the same numbers twice) is
as broken as one that adds wrongly. So a random sample is judged on the target
alone: draw many values there, and test them against the distribution the op
promises, with a false-alarm rate that is *stated and proved*, not tuned.

Design, in the manner of PyTorch's OpInfo: one declarative record per op name
(`RANDOM_OPS`) says how to read the sample's parameters, how to draw again
without the OpInfo's fixed seed, when a sample is random at all, and which
check judges it. Every check is built from a few tests with rigorous tail
bounds, numpy and math only:

- hard constraints (support, range, integrality, a permutation, dropout's
  exact survivor scale): a correct op never violates them, false-alarm 0;
- Kolmogorov-Smirnov against the exact CDF, with the critical value from the
  Dvoretzky-Kiefer-Wolfowitz inequality P(sup|F_n - F| > e) <= 2 exp(-2 n e^2)
  (valid for any F, discrete ones included);
- counts (a binomial or a sum of Bernoullis) with Bernstein's inequality;
- a normal sample's mean with the exact normal tail, its scale with the
  Laurent-Massart chi-square bounds; an exponential mean with the Gamma
  Chernoff bound;
- repetition: the autocorrelation at every lag up to n/2 of a centred
  indicator (above/below the median) must be near 0. Real random-number bugs
  repeat values (every element the same, a block repeated every k elements,
  the same draw on every call) while the marginal distribution stays right;
  this catches them. Hoeffding on two interleaved halves of independent pairs,
  union-bounded over all lags.

The tests of one check share the case's false-alarm budget `alpha` (1e-6 by
default) equally (Bonferroni), so P(a correct op is called a mismatch) <=
alpha per case, whatever the sample. Draws are rounded to the output dtype:
every test widens its bounds by `ULPS` units of rounding per value, so a
correct float16 or bfloat16 generator is not a false alarm either.
"""
import contextlib
import fnmatch
import functools
import inspect
import math
import statistics
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch.utils._pytree import tree_map

from mpsprobe.ops.samples import unwritten_like
from mpsprobe.vocabulary import CHECK_KINDS, INPLACE, MISMATCH, OUT, PASS, REASON_KIND, SKIP

VALUES_CHECK, DISTRIBUTION, SHAPE_CHECK, _ = CHECK_KINDS
assert DISTRIBUTION in REASON_KIND  # the reason kind and the check kind share the word

ALPHA = 1e-6        # false-alarm rate per case
N_VALUES = 1 << 16  # values drawn per check when the budget allows
MAX_CALLS = 4096    # a one-element sample cannot draw 65536 times in a sweep
ULPS = 4            # rounding allowance per value: generators may compute in the output dtype

# Ops whose output is uninitialised memory: only shape, dtype and device mean anything.
SHAPE_ONLY_PATTERNS = ("empty*", "new_empty*", "*empty_like", "empty_strided", "empty_permuted")


class Result(NamedTuple):
    status: str          # PASS or MISMATCH (SKIP when the target drew nothing)
    reason_kind: str     # DISTRIBUTION
    statistic: float     # the deciding test's statistic
    threshold: float     # and the bound it was held to
    detail: str          # every test, the draws, and the stated false-alarm rate


@dataclass(frozen=True)
class _Test:
    name: str
    statistic: float
    threshold: float
    note: str = ""

    @property
    def failed(self):
        return not (self.statistic <= self.threshold)  # NaN fails

    @property
    def ratio(self):
        if self.threshold > 0:
            return self.statistic / self.threshold
        return math.inf if self.failed else 0.0


# --- drawing -------------------------------------------------------------------

def _draws(draw, n, max_calls):
    """Call `draw` until `n` values (and at least 2 calls, so repeats across calls show)."""
    parts, total = [], 0
    while (total < n or len(parts) < 2) and len(parts) < max_calls:
        # Kept on the device and copied to the CPU once: a copy per call would wait for
        # the device each time (hundreds of waits a case). Cloned, since a draw may hand
        # back the same tensor each call (an in-place generator).
        t = draw().detach().clone()
        if t.numel() == 0:
            break
        parts.append(t)
        total += t.numel()
    if not parts:
        return None, None
    dtype = parts[0].dtype
    y = torch.stack([p.to(dtype) for p in parts]).cpu()
    if y.is_complex():  # each part is judged as a real component
        y = torch.view_as_real(y)
    return y.to(torch.float64).numpy(), dtype


def _eps(dtype):
    if dtype.is_complex:
        dtype = torch.float32 if dtype == torch.complex64 else torch.float64
    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _slack(y, dtype, scale=0.0):
    """How far a correct generator's rounded value may sit from the exact draw."""
    eps = _eps(dtype)
    if eps == 0.0:
        return np.zeros_like(y)
    tiny = float(torch.finfo(dtype if dtype.is_floating_point else torch.float32).tiny)
    return ULPS * eps * (np.abs(y) + abs(scale)) + tiny


# --- the tests -----------------------------------------------------------------

def _hard(name, violations, note=""):
    return _Test(name, float(violations), 0.0, note)


def _ks(name, x, cdf, slack, alpha):
    """DKW-bounded KS distance between `x` and `cdf`, each value allowed to move by its slack.

    If each observed y_j lies within s_j of an exact draw x_j, the exact draws'
    empirical CDF lies between that of y - s and that of y + s; the test
    rejects only if even that band leaves F +- e, so the DKW bound still holds.
    """
    slack = np.broadcast_to(slack, x.shape)
    high, low = np.sort(x + slack), np.sort(x - slack)
    n = len(x)
    i = np.arange(1, n + 1)
    d = max(float(np.max(i / n - cdf(high))), float(np.max(cdf(low) - (i - 1) / n)), 0.0)
    return _Test(name, d, math.sqrt(math.log(2 / alpha) / (2 * n)), f"n={n}")


def _ks_discrete(name, x, cdf, alpha):
    """KS against a CDF on the integers (exact values, so no slack): F(x-) is F(x - 1)."""
    x = np.sort(x)
    n = len(x)
    i = np.arange(1, n + 1)
    d = max(float(np.max(i / n - cdf(x))), float(np.max(cdf(x - 1) - (i - 1) / n)), 0.0)
    return _Test(name, d, math.sqrt(math.log(2 / alpha) / (2 * n)), f"n={n}")


def _bernstein(variance, alpha):
    """t with P(|sum of independent [0,1] variables - its mean| >= t) <= alpha."""
    log_term = math.log(2 / alpha)
    return log_term / 3 + math.sqrt(log_term ** 2 / 9 + 2 * variance * log_term)


def _count(name, k, probs, alpha):
    """A count of independent Bernoulli(probs) events, held to Bernstein's bound."""
    probs = np.asarray(probs, dtype=np.float64)
    mean = float(probs.sum())
    t = _bernstein(float((probs * (1 - probs)).sum()), alpha)
    return _Test(name, abs(k - mean), t, f"{int(k)} observed, {mean:.1f} expected")


def _bisect(f, lo, hi, iters=200):
    """The root of increasing `f` on [lo, hi]."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return hi


@functools.lru_cache(maxsize=64)
def _normal_quantile(alpha):
    """z with P(|Z| > z) = alpha for a standard normal Z; alpha in (0, 1]."""
    if not 0 < alpha <= 1:   # a bound for a test that may never (or always) reject is a bug
        raise ValueError(f"a false-alarm rate must be in (0, 1], not {alpha}")
    return -statistics.NormalDist().inv_cdf(alpha / 2)


def _normal_mean(z, slack, alpha):
    """Mean of n standard normals is exactly N(0, 1/n)."""
    n = z.size
    bound = _normal_quantile(alpha) / math.sqrt(n) + float(np.mean(slack))
    return _Test("mean", abs(float(np.mean(z))), bound, f"mean {float(np.mean(z)):+.4f} (expected 0)")


def _normal_scale(z, slack, alpha):
    """sum z^2 of n standard normals is chi-square(n): Laurent-Massart bounds, each side alpha/2.

    P(Q - n >= 2 sqrt(n x) + 2 x) <= e^-x and P(n - Q >= 2 sqrt(n x)) <= e^-x;
    rounding moves the norm ||z|| by at most ||slack||.
    """
    n = z.size
    x = math.log(2 / alpha)
    norm, wiggle = math.sqrt(float(np.sum(z * z))), math.sqrt(float(np.sum(slack * slack)))
    hi = (math.sqrt(n + 2 * math.sqrt(n * x) + 2 * x) + wiggle) / math.sqrt(n)
    lo = (math.sqrt(max(n - 2 * math.sqrt(n * x), 0.0)) - wiggle) / math.sqrt(n)
    return _band("scale", norm / math.sqrt(n), lo, hi, "std")


def _band(name, value, lo, hi, what):
    """A two-sided test as |value - centre| <= half-width of [lo, hi]."""
    return _Test(name, abs(value - (lo + hi) / 2), (hi - lo) / 2,
                 f"{what} {value:.4f}, allowed {lo:.4f}..{hi:.4f}")


def _gamma_mean(x, lambd, slack, alpha):
    """Sum of n Exp(lambd) is Gamma(n): Chernoff bounds on the mean, each side alpha/2.

    P(mean*lambd >= 1+t) <= exp(-n (t - ln(1+t))); P(mean*lambd <= 1-t) <= exp(-n (-t - ln(1-t))).
    """
    n = x.size
    log_term = math.log(2 / alpha)
    up = _bisect(lambda t: n * (t - math.log1p(t)) - log_term, 0.0, 1e6)
    down = _bisect(lambda t: n * (-t - math.log1p(-t)) - log_term, 0.0, 1.0 - 1e-15)
    m = float(np.mean(x)) * lambd
    wiggle = float(np.mean(slack)) * lambd
    return _band("mean", m, 1 - down - wiggle, 1 + up + wiggle, "mean x lambd")


def _repetition(s, bound, alpha, bias=0.0):
    """No lag 1..n/2 at which the centred sequence `s` correlates with itself.

    Under independence E[s_i s_j] = b_i b_j with |b_i| <= delta_i (rounding can
    shift an indicator's mean), so |E sum_i s_i s_{i+l}| <= sum delta_i^2 =
    `bias`; and |s| <= `bound`. For a lag l, the pairs (i, i+l) with i in even
    blocks of length l are independent of each other, and so are those with i
    in odd blocks: Hoeffding on each half and the union bound over both halves
    and all lags give the threshold 2 bound^2 sqrt(ln(4 lags / alpha) (n - l))
    + bias on |sum_i s_i s_{i+l}|.
    """
    n = s.size
    lags = n // 2
    if lags < 1:
        return _Test("repetition", 0.0, 1.0, "too few values")
    spectrum = np.fft.rfft(s, 2 * n)
    auto = np.fft.irfft(spectrum * np.conj(spectrum), 2 * n)[1:lags + 1]
    pairs = n - np.arange(1, lags + 1)
    threshold = 2 * bound ** 2 * np.sqrt(math.log(4 * lags / alpha) * pairs) + bias
    worst = int(np.argmax(np.abs(auto) / threshold))
    return _Test("repetition", abs(float(auto[worst])) / pairs[worst], float(threshold[worst]) / pairs[worst],
                 f"worst lag {worst + 1}")


def _median_split(x, median, cdf, slack_at_median):
    """s = 1[x > median] - 1/2, and the bias rounding can put on sum s_i s_j (see _repetition).

    `slack_at_median`: per value (or one number), how far a rounded value near
    the median may be from its exact draw; it depends on the value's position,
    not on the value drawn.
    """
    slack = np.broadcast_to(np.asarray(slack_at_median, dtype=np.float64), x.shape)
    delta = cdf(median + slack) - cdf(median - slack)
    return (x > median).astype(np.float64) - 0.5, float(np.sum(delta * delta))


def _phi(x):
    return 0.5 * _erfc(-x / math.sqrt(2))


_erfc = np.vectorize(math.erfc, otypes=[float])


def _standard_normal_tests(z, slack, alpha, slack_at_median):
    split, bias = _median_split(z, 0.0, _phi, slack_at_median)
    a = alpha / 4
    return [_normal_mean(z, slack, a), _normal_scale(z, slack, a),
            _ks("ks", z, _phi, slack, a), _repetition(split, 0.5, a, bias)]


def _verdict(tests, y, calls, alpha, family):
    failed = [t for t in tests if t.failed]
    deciding = failed[0] if failed else max(tests, key=lambda t: t.ratio)
    summary = "; ".join(f"{t.name} {t.statistic:.4g}/{t.threshold:.4g}" + (f" ({t.note})" if t.note else "")
                        for t in tests)
    detail = (f"{family}: {'failed ' + ', '.join(t.name for t in failed) if failed else 'consistent'}; "
              f"{y.size} values in {calls} calls; false-alarm rate <= {alpha:.0e}; {summary}")
    return Result(MISMATCH if failed else PASS, DISTRIBUTION, float(deciding.statistic), float(deciding.threshold),
                  detail)


def _nothing_drawn():
    return Result(SKIP, "no_unique_answer", 0.0, 0.0, "the target drew no values (empty output)")


def _as_array(value, shape):
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().to(torch.float64).numpy()
    return np.broadcast_to(np.asarray(value, dtype=np.float64), shape)


def check_normal(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """N(mean, std) per element (mean and std numbers or tensors); complex: each part N(mean, std^2/2).

    Elements with std 0 must equal their mean; the rest are standardised and
    tested as one standard-normal sample: mean, scale, KS, repetition.
    """
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    calls = y.shape[0]
    if dtype.is_complex:
        mean = _as_array(params.get("mean", 0.0), y.shape[:-1])[..., None]
        std = _as_array(params.get("std", 1.0), y.shape[:-1])[..., None] / math.sqrt(2)
    else:
        mean, std = _as_array(params.get("mean", 0.0), y.shape[1:]), _as_array(params.get("std", 1.0), y.shape[1:])
    mean, std = np.broadcast_to(mean, y.shape), np.broadcast_to(std, y.shape)
    slack = _slack(np.abs(y) + np.abs(mean), dtype)  # mean + std z may cancel: rounding follows both
    tests = [_hard("finite", np.sum(~np.isfinite(y)))]
    fixed = std == 0
    tests.append(_hard("std-0 elements equal the mean", np.sum(np.abs(y[fixed] - mean[fixed]) > slack[fixed])))
    live = ~fixed & np.isfinite(y)
    z, zslack = (y[live] - mean[live]) / std[live], slack[live] / std[live]
    at_median = _slack(2 * np.abs(mean), dtype)[live] / std[live]  # the slack of a draw equal to its mean
    if z.size:
        tests += _standard_normal_tests(z, zslack, alpha, at_median)
    return _verdict(tests, y, calls, alpha, "normal")


def check_log_normal(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """exp(N(mean, std)): positive, and log x passes the normal tests."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    mean, std = float(params.get("mean", 1.0)), float(params.get("std", 2.0))
    tests = [_hard("positive and not NaN", np.sum(~(y >= 0)))]
    ok = (y > 0) & np.isfinite(y)
    # A relative rounding r of x moves log x by |log(1 + r)| <= r / (1 - r).
    r = ULPS * _eps(dtype)
    z = (np.log(y[ok]) - mean) / std
    zslack = np.full_like(z, (r / (1 - r) + 1e-300) / std)
    tests.append(_hard("finite", np.sum(~ok)))
    tests += _standard_normal_tests(z, zslack, alpha, zslack[:1] if zslack.size else 0.0)
    return _verdict(tests, y, y.shape[0], alpha, "log-normal")


def check_uniform(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """U(low, high) per value (complex: each part): range, KS, repetition."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    low, high = float(params.get("low", 0.0)), float(params.get("high", 1.0))
    x = y.ravel()
    slack = _slack(x, dtype, abs(low) + abs(high))

    def cdf(v):
        return np.clip((v - low) / (high - low), 0.0, 1.0)

    mid = (low + high) / 2
    split, bias = _median_split(x, mid, cdf, float(_slack(np.array([mid]), dtype, abs(low) + abs(high))[0]))
    a = alpha / 2
    tests = [_hard("in [low, high]", np.sum(~((x >= low - slack) & (x <= high + slack)))),
             _ks("ks", x, cdf, slack, a), _repetition(split, 0.5, a, bias)]
    return _verdict(tests, y, y.shape[0], alpha, f"uniform({low:g}, {high:g})")


def check_exponential(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Exp(lambd): non-negative, Gamma-bounded mean, KS, repetition."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    lambd = float(params.get("lambd", 1.0))
    x = y.ravel()
    slack = _slack(x, dtype)

    def cdf(v):
        return -np.expm1(-lambd * np.maximum(v, 0.0))

    tests = [_hard("non-negative and finite", np.sum(~((x >= 0) & np.isfinite(x))))]
    x = x[np.isfinite(x)]
    slack = _slack(x, dtype)
    median = math.log(2) / lambd
    split, bias = _median_split(x, median, cdf, float(_slack(np.array([median]), dtype)[0]))
    a = alpha / 3
    tests += [_gamma_mean(x, lambd, slack, a), _ks("ks", x, cdf, slack, a), _repetition(split, 0.5, a, bias)]
    return _verdict(tests, y, y.shape[0], alpha, f"exponential({lambd:g})")


def check_cauchy(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Cauchy(median, sigma): no moments exist, so quantiles only.

    The counts below median - sigma, median, median + sigma are binomial with p
    = 1/4, 1/2, 3/4 (Bernstein), and the whole CDF is held by KS; ±inf is a
    legitimate draw in a narrow dtype, NaN is not.
    """
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    median, sigma = float(params.get("median", 0.0)), float(params.get("sigma", 1.0))
    x = y.ravel()
    tests = [_hard("not NaN", np.sum(np.isnan(x)))]
    x = x[~np.isnan(x)]
    slack = np.where(np.isfinite(x), _slack(x, dtype, abs(median)), 0.0)

    def cdf(v):
        return 0.5 + np.arctan((v - median) / sigma) / math.pi

    a = alpha / 5
    for q, point in ((0.25, median - sigma), (0.5, median), (0.75, median + sigma)):
        # A value within its slack of the quartile may come from either side.
        below, near = np.sum(x < point - slack), np.sum(np.abs(x - point) <= slack)
        k = min(max(q * x.size, below), below + near)  # the count of exact draws lies in this range
        tests.append(_count(f"count below q{q:g}", k, np.full(x.size, q), a))
    split, bias = _median_split(x, median, cdf, float(_slack(np.array([median]), dtype, abs(median))[0]))
    tests += [_ks("ks", x, cdf, slack, a), _repetition(split, 0.5, a, bias)]
    return _verdict(tests, y, y.shape[0], alpha, f"cauchy({median:g}, {sigma:g})")


def check_geometric(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Geometric(p) on {1, 2, ...}: integers >= 1, P(X = 1) = p, KS on the exact CDF, repetition."""
    y, _dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    p = float(params["p"])
    x = y.ravel()
    tests = [_hard("integers >= 1", np.sum(~((x >= 1) & (x == np.floor(x)))))]
    x = x[np.isfinite(x)]

    def cdf(k):
        return np.where(k >= 1, -np.expm1(np.floor(np.maximum(k, 1)) * math.log1p(-p)), 0.0)

    a = alpha / 3
    ones = (x == 1).astype(np.float64)
    tests += [_count("count of 1s", ones.sum(), np.full(x.size, p), a), _ks_discrete("ks", x, cdf, a),
              _repetition(ones - p, max(p, 1 - p), a)]
    return _verdict(tests, y, y.shape[0], alpha, f"geometric({p:g})")


def check_bernoulli(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS, groups=8):
    """Bernoulli(p) per element (p a number or a tensor broadcast to the output).

    Values are 0 or 1, p = 0 gives 0 and p = 1 gives 1 exactly; the elements are
    split by p into up to `groups` groups and each group's count of ones is
    held to Bernstein's bound (a total alone would not see p -> 1 - p when the
    p's are symmetric about 1/2); repetition on x - p.
    """
    y, _dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    p = np.broadcast_to(_as_array(params["p"], y.shape[1:]), y.shape)
    tests = [_hard("values in {0, 1}", np.sum(~((y == 0) | (y == 1)))),
             _hard("p = 0 gives 0, p = 1 gives 1", np.sum((p == 0) & (y != 0)) + np.sum((p == 1) & (y != 1)))]
    per_element = p[0].ravel()
    order = np.argsort(per_element, kind="stable")
    chunks = [c for c in np.array_split(order, min(groups, order.size)) if c.size]
    a = alpha / (len(chunks) + 1)
    flat_y, flat_p = y.reshape(y.shape[0], -1), p.reshape(p.shape[0], -1)
    for g, chunk in enumerate(chunks):
        tests.append(_count(f"ones in group {g}", flat_y[:, chunk].sum(), flat_p[:, chunk].ravel(), a))
    bound = float(np.max(np.maximum(flat_p, 1 - flat_p)))
    tests.append(_repetition((flat_y - flat_p).ravel(), bound, a))
    return _verdict(tests, y, y.shape[0], alpha, "bernoulli")


def check_randint(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Uniform on the integers low..high-1: range, KS on the discrete CDF, repetition."""
    y, _dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    low, high = int(params.get("low", 0)), int(params["high"])
    x = y.ravel()
    tests = [_hard("integers in [low, high)", np.sum(~((x >= low) & (x < high) & (x == np.floor(x)))))]
    width = high - low

    def cdf(k):
        return np.clip((np.floor(k) - low + 1) / width, 0.0, 1.0)

    a = alpha / 2
    half = low + width // 2
    q = (half - low) / width
    tests += [_ks_discrete("ks", x, cdf, a), _repetition((x < half) - q, max(q, 1 - q), a)]
    return _verdict(tests, y, y.shape[0], alpha, f"randint[{low}, {high})")


def check_randperm(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """A uniform permutation of 0..n-1: each draw sorted equals arange(n); the first
    and the last element across draws are uniform (KS), which identical draws fail."""
    y, _dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    size = y.shape[1]
    tests = [_hard("a permutation of 0..n-1", np.sum(np.any(np.sort(y, axis=1) != np.arange(size), axis=1)))]

    def cdf(k):
        return np.clip((np.floor(k) + 1) / size, 0.0, 1.0)

    if size > 1:
        tests += [_ks_discrete("first element uniform", y[:, 0], cdf, alpha / 2),
                  _ks_discrete("last element uniform", y[:, -1], cdf, alpha / 2)]
    return _verdict(tests, y, y.shape[0], alpha, f"randperm({size})")


@functools.lru_cache(maxsize=256)
def _inclusion_probabilities(weights, k, limit=200_000):
    """P(category c among k draws without replacement), by enumerating ordered draws; None if too many."""
    live = [c for c, w in enumerate(weights) if w > 0]
    if len(live) ** k > limit:
        return None
    total = float(sum(weights))
    incl = np.zeros(len(weights))

    def walk(chosen, prob, left):
        if len(chosen) == k:
            for c in chosen:
                incl[c] += prob
            return
        for c in live:
            if c not in chosen:
                walk(chosen + (c,), prob * weights[c] / left, left - weights[c])

    walk((), 1.0, total)
    return incl


def check_multinomial(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Category indices per row of weights, with or without replacement.

    Hard: indices in range, never a zero-weight category, no repeats within a
    row without replacement. With replacement every index is categorical(p):
    each (row, category) count is binomial (Bernstein), plus repetition.
    Without replacement each (row, category) inclusion is Bernoulli(pi) per
    draw, pi computed exactly by enumeration (the draws' order is not
    promised, so only inclusion is tested).
    """
    y, _dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    weights = params["probs"]
    weights = (weights.detach().cpu().to(torch.float64).numpy() if isinstance(weights, torch.Tensor)
               else np.asarray(weights, dtype=np.float64))
    replacement = bool(params.get("replacement", False))
    rows = weights.reshape(-1, weights.shape[-1])
    cats = rows.shape[1]
    idx = y.reshape(y.shape[0], rows.shape[0], -1)  # (calls, rows, samples)
    k = idx.shape[-1]
    in_range = (idx >= 0) & (idx < cats) & (idx == np.floor(idx))
    tests = [_hard("indices in range", np.sum(~in_range))]
    safe = np.where(in_range, idx, 0).astype(np.int64)
    row_w = np.broadcast_to(rows[None, :, None, :], idx.shape + (cats,))
    drawn_w = np.take_along_axis(row_w, safe[..., None], axis=-1)[..., 0]
    tests.append(_hard("no zero-probability category", np.sum(in_range & (drawn_w <= 0))))
    probs = rows / rows.sum(axis=1, keepdims=True)
    onehot = safe[..., None] == np.arange(cats)  # (calls, rows, samples, cats)
    if not replacement:
        tests.append(_hard("no repeats within a row", np.sum(onehot.sum(axis=2) > 1)))
        pis = [_inclusion_probabilities(tuple(float(w) for w in r), k) for r in rows]
        if any(pi is None for pi in pis):
            return _verdict(tests, y, y.shape[0], alpha, "multinomial without replacement (hard checks only)")
        incl = onehot.any(axis=2)  # (calls, rows, cats)
        a = alpha / (rows.shape[0] * cats)
        for r, pi in enumerate(pis):
            for c in range(cats):
                if 0 < pi[c] < 1:
                    tests.append(_count(f"row {r} includes {c}", incl[:, r, c].sum(),
                                        np.full(idx.shape[0], pi[c]), a))
        return _verdict(tests, y, y.shape[0], alpha, "multinomial without replacement")
    a = alpha / (rows.shape[0] * cats + 1)
    counts = onehot.sum(axis=(0, 2))  # (rows, cats)
    trials = idx.shape[0] * k
    for r in range(rows.shape[0]):
        for c in range(cats):
            if 0 < probs[r, c] < 1:
                tests.append(_count(f"row {r} category {c}", counts[r, c], np.full(trials, probs[r, c]), a))
    # Repetition on "index in the row's lower half of categories", centred by its probability.
    half = cats // 2
    q = probs[:, :half].sum(axis=1)[None, :, None]
    s = ((safe < half) - q).ravel()
    tests.append(_repetition(s, float(np.max(np.maximum(q, 1 - q))), a))
    return _verdict(tests, y, y.shape[0], alpha, "multinomial with replacement")


# --- dropout family and rrelu ----------------------------------------------------

_ALPHA_DROPOUT = 1.7580993408473766  # SELU's -alpha * lambda, aten/src/ATen/native/Dropout.cpp


def _unit_dims(op_name, ndim):
    """How many leading dims index one dropout decision (Dropout.cpp's make_feature_noise)."""
    if op_name.startswith("nn.functional.dropout2d"):
        return min(2, ndim)                        # (N, C, H, W), and 3-D read as (N, C, L)
    if op_name.startswith("nn.functional.dropout3d"):
        return 1 if ndim == 4 else min(2, ndim)    # unbatched (C, D, H, W)
    if "feature_alpha_dropout" in op_name:
        return min(2, ndim)
    return ndim                                    # one decision per element


def _mask_verdict(op_name, x, y, dtype, kept_value, dropped_value, p, alpha, calls):
    """Each element either kept (kept_value) or dropped (dropped_value); decisions per unit;
    the dropped fraction is Binomial(units, p); the decisions do not repeat."""
    tol = _slack(np.abs(kept_value) + np.abs(dropped_value), dtype)
    is_kept = np.abs(y - kept_value) <= tol
    is_dropped = np.abs(y - dropped_value) <= tol
    # Decided by position, never by the outcome (that would bias the count): an
    # element tells kept from dropped only when the two values cannot be confused.
    informative = np.abs(kept_value - dropped_value) > 2 * tol
    tests = [_hard("each value kept (scaled exactly) or dropped", np.sum(~(is_kept | is_dropped)))]
    lead = _unit_dims(op_name, x.ndim)
    shape = (calls, int(np.prod(x.shape[:lead], dtype=np.int64)), -1)
    inf_u, drop_u = informative.reshape(shape), (is_dropped & informative).reshape(shape)
    units_seen = inf_u.any(axis=2)
    units_dropped = drop_u.any(axis=2)
    tests.append(_hard("one decision per unit", np.sum(units_seen & units_dropped & (drop_u != inf_u).any(axis=2))))
    decisions = units_dropped[units_seen].astype(np.float64)
    a = alpha / 2
    tests += [_count("dropped units", decisions.sum(), np.full(decisions.size, p), a),
              _repetition(decisions - p, max(p, 1 - p), a)]
    return _verdict(tests, y, calls, alpha, f"{op_name.split('.')[-1]}(p={p:g})")


def check_dropout(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS, op_name="nn.functional.dropout"):
    """Survivors are x / (1 - p) (within rounding), the rest 0; dropped fraction ~ p."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    x = _as_array(params["input"], y.shape[1:])
    p = float(params.get("p", 0.5))
    xs = np.broadcast_to(x, y.shape)
    return _mask_verdict(op_name, x, y, dtype, xs / (1 - p), np.zeros_like(xs), p, alpha, y.shape[0])


# Draws whose gradient PyTorch defines as zeros, whatever was drawn (not reparameterised:
# tools/autograd/derivatives.yaml, normal.* and bernoulli: zeros): unique, so compared by value.
DRAW_WITHOUT_GRADIENT = ("normal", "normal.number_mean", "bernoulli")

# Dropout whose gradient is the same dropout applied to grad_output: g * mask / (1 - p).
DROPOUT_GRADIENTS = ("nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d")
# Random samples whose gradient is judged by distribution (check_gradient).
GRADIENT_CHECKED = DROPOUT_GRADIENTS + ("nn.functional.rrelu",)


def _drawn_with_gradient(call, inp, args, kwargs, grad_output, context):
    """One fresh draw on the target and its gradient for `grad_output`: (input, output, gradient)."""
    with context():
        x = inp.detach().clone().requires_grad_(True)
        out = call(x, args, kwargs)
        (grad,) = torch.autograd.grad(out, x, grad_output)
    return x, out, grad


def check_dropout_gradient(op_name, inp, args, kwargs, grad_output, n=N_VALUES, alpha=ALPHA,
                           max_calls=MAX_CALLS, context=contextlib.nullcontext):
    """The gradient of a dropout sample (arguments on the target), drawn afresh each call: it
    must be dropout applied to `grad_output` (check_dropout, with grad_output as the input),
    and drop exactly where that call's forward dropped (a hard check, where neither the
    input nor grad_output is 0)."""
    call, args, kwargs = RANDOM_OPS[op_name].call, tuple(args), dict(kwargs or {})
    params = dict(sample_params(op_name, inp, args, kwargs), input=grad_output.detach().cpu())
    disagreements = [0]

    def draw():
        x, out, grad = _drawn_with_gradient(call, inp, args, kwargs, grad_output, context)
        x, out, grad, g = (t.detach().cpu() for t in (x, out, grad, grad_output))
        informative = (x != 0) & (g != 0)
        disagreements[0] += int((((out != 0) != (grad != 0)) & informative).sum())
        return grad
    result = check_dropout(params, draw, n=n, alpha=alpha, max_calls=max_calls, op_name=op_name)
    if result.status == SKIP or not disagreements[0]:
        return result
    return Result(MISMATCH, DISTRIBUTION, float(disagreements[0]), 0.0,
                  f"gradient: {disagreements[0]} values kept where the forward dropped them or dropped where "
                  f"it kept them; {result.detail}")


def check_rrelu_gradient(op_name, inp, args, kwargs, grad_output, n=N_VALUES, alpha=ALPHA,
                         max_calls=MAX_CALLS, context=contextlib.nullcontext):
    """The gradient of a training rrelu sample (arguments on the target), drawn afresh each
    call: the forward passes check_rrelu, and the gradient is grad_output where the input
    is >= 0 and grad_output times that call's own slope (out / x) where it is < 0 (a hard
    check, within rounding)."""
    call, args, kwargs = RANDOM_OPS[op_name].call, tuple(args), dict(kwargs or {})
    params = sample_params(op_name, inp, args, kwargs)
    upper = float(params.get("upper", 1 / 3))
    violations = [0]

    def draw():
        x, out, grad = _drawn_with_gradient(call, inp, args, kwargs, grad_output, context)
        xs, ys, gs, go = (t.detach().cpu().to(torch.float64).numpy() for t in (x, out, grad, grad_output))
        dtype = grad.dtype
        positive = xs >= 0
        violations[0] += int(np.sum(positive & (np.abs(gs - go) > _slack(go, dtype))))
        negative = (xs < 0) & (go != 0)
        slope_out, slope_grad = ys[negative] / xs[negative], gs[negative] / go[negative]
        allowed = 2 * (_slack(slope_out, dtype, upper) + _slack(slope_grad, dtype, upper))
        violations[0] += int(np.sum(~(np.abs(slope_grad - slope_out) <= allowed)))
        return out
    result = check_rrelu({**params, "input": inp.detach().cpu()}, draw, n=n, alpha=alpha, max_calls=max_calls)
    if result.status == SKIP or not violations[0]:
        return result
    return Result(MISMATCH, DISTRIBUTION, float(violations[0]), 0.0,
                  f"gradient: {violations[0]} values not grad_output times the forward's own slope; "
                  f"{result.detail}")


def check_alpha_dropout(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS,
                        op_name="nn.functional.alpha_dropout"):
    """Kept: a x + alpha a p; dropped: -alpha a (1 - p), a = ((alpha^2 p + 1)(1 - p))^-1/2 (Dropout.cpp)."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    x = _as_array(params["input"], y.shape[1:])
    p = float(params.get("p", 0.5))
    a = 1 / math.sqrt((_ALPHA_DROPOUT ** 2 * p + 1) * (1 - p))
    xs = np.broadcast_to(x, y.shape)
    kept = a * xs + _ALPHA_DROPOUT * a * p
    dropped = np.full_like(kept, -_ALPHA_DROPOUT * a * (1 - p))
    return _mask_verdict(op_name, x, y, dtype, kept, dropped, p, alpha, y.shape[0])


def check_gradient(op_name, inp, args, kwargs, grad_output, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS,
                   context=contextlib.nullcontext):
    """The distribution verdict on the gradient of a random sample of `op_name` (one of
    GRADIENT_CHECKED), drawn on the target for `grad_output`, each draw within `context()`."""
    check = check_rrelu_gradient if op_name == "nn.functional.rrelu" else check_dropout_gradient
    return check(op_name, inp, args, kwargs, grad_output, n=n, alpha=alpha, max_calls=max_calls, context=context)


def check_rrelu(params, draw, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS):
    """Training rrelu: x >= 0 unchanged; x < 0 scaled by a slope ~ U(lower, upper) per element."""
    y, dtype = _draws(draw, n, max_calls)
    if y is None:
        return _nothing_drawn()
    x = np.broadcast_to(_as_array(params["input"], y.shape[1:]), y.shape)
    lower, upper = float(params.get("lower", 1 / 8)), float(params.get("upper", 1 / 3))
    tests = [_hard("non-negative part unchanged", np.sum((x >= 0) & (y != x)))]
    neg = x < 0
    slope = y[neg] / x[neg]
    slack = _slack(slope, dtype, upper)
    tests.append(_hard("slopes in [lower, upper]", np.sum(~((slope >= lower - slack) & (slope <= upper + slack)))))

    def cdf(v):
        return np.clip((v - lower) / (upper - lower), 0.0, 1.0)

    mid = (lower + upper) / 2
    split, bias = _median_split(slope, mid, cdf, float(_slack(np.array([mid]), dtype, upper)[0]))
    a = alpha / 2
    tests += [_ks("slopes uniform", slope, cdf, slack, a), _repetition(split, 0.5, a, bias)]
    return _verdict(tests, y, y.shape[0], alpha, f"rrelu({lower:g}, {upper:g})")


# --- the table ---------------------------------------------------------------------

def _bind(args, kwargs, **defaults):
    """Positional `args` and `kwargs` named after `defaults` (in order), defaults filled in."""
    out = dict(zip(defaults, args))
    out.update({k: v for k, v in kwargs.items() if k in defaults})
    return {k: out.get(k, v) for k, v in defaults.items()}


def _renamed(params, **names):
    return {new: params[old] for new, old in names.items()}


def _values(v):
    """A number or tensor parameter as a numpy array, for deciding whether a sample is random."""
    return v.detach().cpu().to(torch.float64).numpy() if isinstance(v, torch.Tensor) else np.asarray(v, float)


def _numel(t):
    return t.numel() if isinstance(t, torch.Tensor) else 1


def _size_numel(size):
    size = size if isinstance(size, (tuple, list, torch.Size)) else (size,)
    return int(np.prod([int(s) for s in size], dtype=np.int64))


def _factory_kwargs(kwargs):
    return {k: v for k, v in kwargs.items() if k in ("dtype", "device", "layout", "generator", "out")}


@dataclass(frozen=True)
class RandomOp:
    """One OpInfo op's random contract."""
    check: Callable     # check(params, draw, n=, alpha=) -> Result
    params: Callable    # params(inp, args, kwargs) -> dict of named parameters
    call: Callable      # call(inp, args, kwargs) -> tensor: the op itself, no fixed seed
    random: Callable = lambda p: True  # random(params) -> bool: does this sample draw at all?
    note: str = ""


def _dropout_params(inp, args, kwargs, training_default=True):
    return {"input": inp, **_bind(args, kwargs, p=0.5, training=training_default)}


def _dropout_random(p):
    return bool(p["training"]) and 0 < float(p["p"]) < 1 and _numel(p["input"]) > 0


def _dropout(name, fn, check, training_default=True):
    return RandomOp(functools.partial(check, op_name=name), lambda i, a, k: _dropout_params(i, a, k, training_default),
                    lambda i, a, k: fn(i, *a, **k), _dropout_random)


def _inplace(method):
    def call(i, a, k):
        return getattr(i.clone(), method)(*a, **k)
    call.method = method  # the in-place form itself, on a copy (make_draw's INPLACE calls it bare)
    return call


def _normal_params(inp, args, kwargs):
    # torch.normal(mean, std): tensors broadcast, so the output has the larger numel
    std = _bind(args, kwargs, std=1.0)["std"]
    return {"mean": inp, "std": std, "numel": max(_numel(inp), _numel(std))}


def _randint_params(inp, args, kwargs):
    # torch.randint(high, size) or torch.randint(low, high, size)
    if len(args) >= 2:
        return {"low": inp, "high": args[0], "size": args[1]}
    return {"low": 0, "high": inp, "size": args[0] if args else kwargs.get("size", ())}


def _randint_like_params(inp, args, kwargs):
    if len(args) >= 2:
        low, high = args[0], args[1]
    else:
        low, high = kwargs.get("low", 0), args[0] if args else kwargs["high"]
    return {"low": low, "high": high, "numel": _numel(inp)}


def _multinomial_params(inp, args, kwargs):
    return {"probs": inp, **_bind(args, kwargs, num_samples=1, replacement=False)}


_F = torch.nn.functional

RANDOM_OPS = {
    "normal": RandomOp(
        check_normal, _normal_params, lambda i, a, k: torch.normal(i, *a, **k),
        lambda p: p["numel"] > 0 and bool(np.any(_values(p["std"]) != 0)),
        "torch.normal(mean tensor, std tensor or number): standardised per element"),
    "normal.number_mean": RandomOp(
        # The OpInfo's op is lambda std, mean, *args: torch.normal(mean, std, *args).
        check_normal,
        lambda i, a, k: {"std": i, "mean": a[0],
                         "numel": _size_numel(a[1]) if len(a) > 1 else _numel(a[0])},
        lambda i, a, k: torch.normal(a[0], i, *a[1:], **k),
        lambda p: p["numel"] > 0 and bool(np.any(_values(p["std"]) != 0))),
    "normal.in_place": RandomOp(
        check_normal, lambda i, a, k: {**_bind(a, k, mean=0.0, std=1.0), "numel": _numel(i)},
        _inplace("normal_"), lambda p: p["numel"] > 0 and p["std"] != 0),
    "uniform": RandomOp(  # Tensor.uniform_(from, to)
        check_uniform,
        lambda i, a, k: {**_renamed(_bind(a, k, **{"from": 0.0, "to": 1.0}), low="from", high="to"),
                         "numel": _numel(i)},
        _inplace("uniform_"), lambda p: p["numel"] > 0 and p["low"] != p["high"]),
    "exponential": RandomOp(
        check_exponential, lambda i, a, k: {**_bind(a, k, lambd=1.0), "numel": _numel(i)},
        _inplace("exponential_"), lambda p: p["numel"] > 0),
    "geometric": RandomOp(
        check_geometric, lambda i, a, k: {**_bind(a, k, p=0.5), "numel": _numel(i)},
        _inplace("geometric_"), lambda p: p["numel"] > 0 and 0 < float(p["p"]) < 1),
    "cauchy": RandomOp(
        check_cauchy, lambda i, a, k: {**_bind(a, k, median=0.0, sigma=1.0), "numel": _numel(i)},
        _inplace("cauchy_"), lambda p: p["numel"] > 0 and p["sigma"] > 0),
    "log_normal": RandomOp(
        check_log_normal, lambda i, a, k: {**_bind(a, k, mean=1.0, std=2.0), "numel": _numel(i)},
        _inplace("log_normal_"), lambda p: p["numel"] > 0 and p["std"] > 0),
    "bernoulli": RandomOp(
        # torch.bernoulli(input): input holds the probabilities; a `p=` number overrides them.
        check_bernoulli, lambda i, a, k: {"p": k.get("p", a[0] if a else i), "numel": _numel(i)},
        lambda i, a, k: torch.bernoulli(i, *a, **k),
        lambda p: p["numel"] > 0 and bool(np.any((_values(p["p"]) > 0) & (_values(p["p"]) < 1)))),
    "multinomial": RandomOp(
        check_multinomial, _multinomial_params, lambda i, a, k: torch.multinomial(i, *a, **k),
        lambda p: _numel(p["probs"]) > 0 and int(p["num_samples"]) > 0),
    "randint": RandomOp(
        check_randint, _randint_params, lambda i, a, k: torch.randint(i, *a, **k),
        lambda p: _size_numel(p["size"]) > 0 and int(p["high"]) - int(p["low"]) > 1),
    "randint_like": RandomOp(
        check_randint, _randint_like_params, lambda i, a, k: torch.randint_like(i, *a, **k),
        lambda p: p["numel"] > 0 and int(p["high"]) - int(p["low"]) > 1),
    "randn": RandomOp(
        check_normal, lambda i, a, k: {"size": i}, lambda i, a, k: torch.randn(i, *a, **_factory_kwargs(k)),
        lambda p: _size_numel(p["size"]) > 0),
    "rand": RandomOp(
        check_uniform, lambda i, a, k: {"size": i}, lambda i, a, k: torch.rand(i, *a, **_factory_kwargs(k)),
        lambda p: _size_numel(p["size"]) > 0),
    "randn_like": RandomOp(
        check_normal, lambda i, a, k: {"numel": _numel(i)}, lambda i, a, k: torch.randn_like(i, *a, **k),
        lambda p: p["numel"] > 0),
    "rand_like": RandomOp(
        # The OpInfo's own op calls torch.randn_like (a slip in common_methods_invocations);
        # the draws come from torch.rand_like, the op this case is named after.
        check_uniform, lambda i, a, k: {"numel": _numel(i)}, lambda i, a, k: torch.rand_like(i, *a, **k),
        lambda p: p["numel"] > 0),
    "randperm": RandomOp(
        check_randperm, lambda i, a, k: {"n": int(i)}, lambda i, a, k: torch.randperm(i, *a, **_factory_kwargs(k)),
        lambda p: p["n"] > 1),
    "nn.functional.dropout": _dropout("nn.functional.dropout", _F.dropout, check_dropout),
    "nn.functional.dropout2d": _dropout("nn.functional.dropout2d", _F.dropout2d, check_dropout),
    "nn.functional.dropout3d": _dropout("nn.functional.dropout3d", _F.dropout3d, check_dropout),
    # alpha_dropout and feature_alpha_dropout default to training=False.
    "nn.functional.alpha_dropout": _dropout(
        "nn.functional.alpha_dropout", _F.alpha_dropout, check_alpha_dropout, training_default=False),
    "nn.functional.feature_alpha_dropout.with_train": _dropout(
        "nn.functional.feature_alpha_dropout.with_train", _F.feature_alpha_dropout, check_alpha_dropout,
        training_default=False),
    "nn.functional.feature_alpha_dropout.without_train": _dropout(
        "nn.functional.feature_alpha_dropout.without_train", _F.feature_alpha_dropout, check_alpha_dropout,
        training_default=False),
    "nn.functional.rrelu": RandomOp(
        check_rrelu,
        lambda i, a, k: {"input": i, **_bind(a, k, lower=1 / 8, upper=1 / 3, training=False)},
        lambda i, a, k: _F.rrelu(i, *a, **k),
        lambda p: bool(p["training"]) and p["upper"] > p["lower"]
        and bool(np.any(_values(p["input"]) < 0))),
}


def random_op(op_name):
    """The op's RandomOp record, or None for a deterministic op."""
    return RANDOM_OPS.get(op_name)


def is_shape_only(op_name):
    return any(fnmatch.fnmatchcase(op_name, p) for p in SHAPE_ONLY_PATTERNS)


# --- dropout inside other ops ---------------------------------------------------------
#
# Attention, multi-head attention, RNNs and the like apply dropout when given a
# positive dropout probability (in training, where they take a training flag):
# such a sample draws, whatever the op is called. Read from the op's own
# parameter names (its Python signature, else its aten schema), never from a list.

DROPOUT_NAMES = ("dropout_p", "dropout")
TRAINING_NAMES = ("training", "train")


def _resolve(op_name):
    """The torch callable an OpInfo op name (with or without a variant) names, or None."""
    parts = op_name[len("torch."):].split(".") if op_name.startswith("torch.") else op_name.split(".")
    for end in range(len(parts), 0, -1):
        obj = torch
        try:
            for part in parts[:end]:
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if callable(obj):
            return obj
    return None


@functools.lru_cache(maxsize=None)
def op_parameters(op_name):
    """((positional names), {name: default}) of the op `op_name` names, or None where unreadable."""
    fn = _resolve(op_name)
    if fn is None:
        return None
    try:
        sig = inspect.signature(fn)
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params = [p for p in sig.parameters.values()
                  if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        if params:
            return (tuple(p.name for p in params if p.kind in kinds),
                    {p.name: (None if p.default is inspect.Parameter.empty else p.default) for p in params})
    except (TypeError, ValueError):
        pass
    qualified = getattr(fn, "_qualified_op_name", None) or f"aten::{getattr(fn, '__name__', '')}"
    try:
        schemas = torch._C._jit_get_schemas_for_operator(qualified)
    except Exception:
        return None
    if not schemas:
        return None
    args = schemas[0].arguments
    return (tuple(a.name for a in args if not a.kwarg_only), {a.name: a.default_value for a in args})


def _number(v):
    if isinstance(v, torch.Tensor):
        return float(v) if v.numel() == 1 and not v.is_complex() else None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def dropout_params(op_name, inp, args=(), kwargs=None):
    """{"dropout": p, "training": flag} where `op_name` takes a dropout probability, else {}."""
    try:
        names = op_parameters(op_name)
    except Exception:
        return {}
    if names is None:
        return {}
    positional, defaults = names
    if not any(n in defaults for n in DROPOUT_NAMES):
        return {}
    bound = dict(defaults)
    bound.update(zip(positional, (inp,) + tuple(args)))
    bound.update(kwargs or {})
    p = next((_number(bound[n]) for n in DROPOUT_NAMES if n in bound), None)
    training = next((bound[n] for n in TRAINING_NAMES if n in bound), True)
    # An unreadable probability counts as drawing: a sample is compared by value only when it cannot draw.
    return {"dropout": 1.0 if p is None else p, "training": True if training is None else bool(training)}


def sample_params(op_name, inp, args=(), kwargs=None):
    """The named parameters (p, mean/std, low/high, input, ...) of one sample of `op_name`;
    for an op outside the table, its dropout probability and training flag, if it takes them."""
    if op_name not in RANDOM_OPS:
        return dropout_params(op_name, inp, tuple(args), dict(kwargs or {}))
    return RANDOM_OPS[op_name].params(inp, tuple(args), dict(kwargs or {}))


def applies_dropout(params):
    """Whether the dropout parameters of a sample (`dropout_params`) make it draw: p > 0, in training."""
    return bool(params) and params.get("dropout", 0) > 0 and bool(params.get("training", True))


def is_random_sample(op_name, sample_kwargs):
    """Whether this sample draws random values, from its named parameters (`sample_params`).

    False for ops that are not random, for empty outputs, and for samples that
    are deterministic: dropout with p = 0 or p = 1 or not training, rrelu in
    eval mode, bernoulli with every p in {0, 1}, a zero std, ... True for any
    other op applying dropout with p > 0 in training (attention and the like).
    """
    entry = RANDOM_OPS.get(op_name)
    if entry is None:
        return applies_dropout(sample_kwargs)
    return bool(entry.random(sample_kwargs))


def check_kind(op_name, sample_kwargs):
    """DISTRIBUTION for a random sample, SHAPE_CHECK for uninitialised memory, else VALUES_CHECK."""
    if is_shape_only(op_name):
        return SHAPE_CHECK
    return DISTRIBUTION if is_random_sample(op_name, sample_kwargs) else VALUES_CHECK


def make_draw(op_name, inp, args=(), kwargs=None, form=None, context=contextlib.nullcontext):
    """A callable drawing once more from the op with these (target-placed) arguments.

    The OpInfo's own op fixes the seed on every call (wrapper_set_seed), which
    would make every draw identical: this calls the op itself. `form`: INPLACE
    draws through the in-place form (a Tensor method such as cauchy_, or the
    function with inplace=True) into a fresh copy of the input each time; OUT
    through the out= form, into buffers that start as NaN (zeros for integers),
    so a kernel that leaves them unwritten is seen. Each draw runs within `context()`
    (the target's), the statistics outside it.
    """
    call, args, kwargs = RANDOM_OPS[op_name].call, tuple(args), dict(kwargs or {})
    draw = _draw(call, inp, args, kwargs, form)

    def within():
        with context():
            return draw()
    return within


def _draw(call, inp, args, kwargs, form):
    if form == INPLACE:
        method = getattr(call, "method", None)

        def into_a_copy():  # what was written into the input, not what the call returned
            x = inp.clone()
            if method:
                getattr(x, method)(*args, **kwargs)
            else:
                call(x, args, dict(kwargs, inplace=True))
            return x
        return into_a_copy
    if form == OUT:
        def into_buffers():
            buffers = tree_map(unwritten_like, call(inp, args, kwargs))
            call(inp, args, dict(kwargs, out=buffers))
            return buffers
        return into_buffers
    return lambda: call(inp, args, kwargs)


def check_sample(op_name, inp, args=(), kwargs=None, n=N_VALUES, alpha=ALPHA, max_calls=MAX_CALLS, form=None,
                 context=contextlib.nullcontext):
    """The distribution verdict for one sample of `op_name` (arguments already on the target),
    drawn through the op's `form`, each draw within `context()` (make_draw).

    An exception from the target's draw propagates: raising is the caller's to classify.
    """
    params = sample_params(op_name, inp, args, kwargs)
    return RANDOM_OPS[op_name].check(params, make_draw(op_name, inp, args, kwargs, form, context), n=n, alpha=alpha,
                                     max_calls=max_calls)
