"""Timing a case: a few synchronised runs on each side, bounded so cheap ops stay cheap."""
import statistics
import time
import warnings

from mpsprobe.vocabulary import PASS

# A case's `timing`: False, True (time it), or PASSING: time it only if it passed (a
# failed or fallen-back case's time says nothing about the op's kernel). A sweep times
# one passing case per (op, dtype) and pass; real-size speed is `bench`'s.
PASSING = "passing"

# Per side of a timed case: repetitions until MAX_REPS or BUDGET_S is spent (at least one).
# A sweep times one case per (op, dtype) and pass, so a pair of the default passes spends at
# most about 4 x 2 x BUDGET_S beyond its slowest single calls.
MAX_REPS = 5
BUDGET_S = 0.025


def wanted(timing, status):
    """Whether a case judged `status` is timed under `timing`."""
    return bool(timing) and (timing != PASSING or status == PASS)


def summarize(times_ms):
    """(median, interquartile range) of a list of times; (None, None) if empty."""
    if not times_ms:
        return None, None
    if len(times_ms) < 2:
        return times_ms[0], 0.0
    q1, _, q3 = statistics.quantiles(times_ms, n=4, method="inclusive")
    return statistics.median(times_ms), q3 - q1


def repeated_ms(fn, synchronize, max_reps=MAX_REPS, budget_s=BUDGET_S):
    """The wall times of a few runs of `fn`, each synchronised, in milliseconds.

    The caller has already run `fn` once (the correctness run is the warm-up).
    Stops after `max_reps` runs or once `budget_s` is spent, whichever is first,
    so a slow op is timed once and a cheap one `max_reps` times.
    """
    times = []
    spent = 0.0
    while len(times) < max_reps and (not times or spent < budget_s):
        start = time.perf_counter()
        fn()
        synchronize()
        elapsed = time.perf_counter() - start
        times.append(elapsed * 1000.0)
        spent += elapsed
    return times


def both_sides(on_cpu, on_target, target, notes):
    """A timed case's fields: ref_ms (`on_cpu()`), target_ms (`on_target()` on `target`,
    synchronised) and speedup; `notes["timing"]` says each side's repetitions and
    interquartile spread in ms, so that a figure comes with its noise. {} when a call raises."""
    try:
        ref = repeated_ms(on_cpu, lambda: None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with target.context():
                tgt = repeated_ms(on_target, target.synchronize)
    except Exception:
        return {}
    (ref_ms, ref_spread), (target_ms, target_spread) = summarize(ref), summarize(tgt)
    notes["timing"] = {"ref_reps": len(ref), "ref_spread_ms": round(ref_spread, 6),
                       "target_reps": len(tgt), "target_spread_ms": round(target_spread, 6)}
    return {"ref_ms": ref_ms, "target_ms": target_ms, "speedup": ref_ms / target_ms if target_ms > 0 else None}
