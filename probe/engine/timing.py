"""Timing a call: median of a few synchronised runs, bounded so cheap ops stay cheap."""
import statistics
import time

from mpsprobe.vocabulary import PASS

# A case's `timing`: False, True (time it), or PASSING: time it only if it passed (a
# failed or fallen-back case's time says nothing about the op's kernel). A sweep times
# one passing case per (op, dtype) and pass; real-size speed is `bench`'s.
PASSING = "passing"


def wanted(timing, status):
    """Whether a case judged `status` is timed under `timing`."""
    return bool(timing) and (timing != PASSING or status == PASS)


def median_ms(fn, synchronize, max_reps=5, budget_s=0.05):
    """Median wall time of `fn` in milliseconds.

    The caller has already run `fn` once (the correctness run is the warm-up).
    Stops after `max_reps` runs or once `budget_s` is spent, whichever is first,
    so a slow op is timed once and a cheap one five times.
    """
    times = []
    spent = 0.0
    while len(times) < max_reps and (not times or spent < budget_s):
        start = time.perf_counter()
        fn()
        synchronize()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return statistics.median(times) * 1000.0
