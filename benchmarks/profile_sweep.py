"""Where a sweep's time goes: cProfile of the parent and of every worker, broken down.

Runs one fresh sweep through the Python API with the parent under cProfile and
each worker under cProfile too (MPSPROBE_PROFILE), then prints, for the parent
and for the workers together, the seconds spent in each part of the work (one
Markdown table each) and the functions with the most time of their own.

    python benchmarks/profile_sweep.py --device cpu --samples 1 --shard 1/5 --workers 1
    python benchmarks/profile_sweep.py --device cuda --samples 3 --timing on --workers 1 --shard 1/8

The .prof files stay in --out (default: a temporary folder) for `python -m pstats`.
cProfile slows Python code (not the kernels) by roughly 1.5-2x: read the parts
as shares of the work, not as the sweep's unprofiled time. A worker's profile is
written every few seconds and the pool kills workers at the end, so its last
seconds may be missing.
"""
import argparse
import cProfile
import glob
import os
import pstats
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

# (part, how to find it: a (file ending, function name) whose cumulative time it is,
# a list of them (summed), or ("via", callee, caller): a callee's time when called
# from that caller only)
WORKER_PARTS = [
    ("waiting for the next request", ("worker.py", "readline")),
    ("planning (the first worker)", ("worker.py", "plan")),
    ("all of its pairs", ("worker.py", "pair")),
    ("replying (JSON lines to the parent)", [("worker.py", "hold"), ("worker.py", "flush"),
                                             ("worker.py", "send")]),
    ("finding the op in the catalogue", ("opinfo.py", "find")),
    ("generating samples", ("opinfo.py", "samples")),
    ("running cases (all of run_case)", ("execute.py", "run_case")),
    ("  the CPU reference and float64 truth calls", ("via", ("execute.py", "_call"), ("execute.py", "run_case"))),
    ("  the target call, synchronised", ("execute.py", "_call_on_target")),
    ("  recording the aten ops (a call of its own)", ("execute.py", "_record_aten")),
    ("  copying inputs to the target / upcasting", ("execute.py", "_moved")),
    ("  comparing outputs", ("verdict.py", "compare")),
    ("  judging (ties, phases, precision allowances)", ("judge.py", "prepare")),
    ("  random ops' distribution tests", ("judge.py", "distribution")),
    ("  timing", ("execute.py", "_time")),
    ("running backward cases", ("backward.py", "run_backward_case")),
    ("running in-place and out= cases", ("variants.py", "run_variant_case")),
]
PARENT_PARTS = [
    ("start-up (first worker: describe, plan)", ("sweep.py", "prepare")),
    ("opening the run", ("sweep.py", "open")),
    ("waiting for workers (select)", ("selectors.py", "select")),
    ("reading and decoding replies", ("pool.py", "messages")),
    ("recording results (SQLite)", ("writer.py", "record")),
    ("committing pairs (SQLite)", ("writer.py", "pair_done")),
    ("handing out pairs", ("pool.py", "_assign")),
    ("finishing the run", ("writer.py", "finish")),
]


def _matches(key, where):
    path, _, name = key
    ending, func = where
    if func == "readline":
        return name == "<method 'readline' of '_io.TextIOWrapper' objects>"
    return path.endswith(ending) and name == func.split(".")[-1]


def cumulative(stats, where):
    """Seconds in `where` (and what it calls), summed over its entries."""
    if isinstance(where, list):
        return sum(cumulative(stats, w) for w in where)
    if where[0] == "via":
        callee, caller = where[1], where[2]
        total = 0.0
        for key, (_, _, _, _, callers) in stats.stats.items():
            if _matches(key, callee):
                total += sum(edge[3] for ck, edge in callers.items() if _matches(ck, caller))
        return total
    return sum(ct for key, (_, _, _, ct, _) in stats.stats.items() if _matches(key, where))


def table(title, stats, parts, total):
    print(f"\n{title}: {total:.2f} s profiled\n\n| part | s | share |\n|---|---|---|")
    for label, where in parts:
        seconds = cumulative(stats, where)
        if seconds or not label.startswith("  "):
            print(f"| {label} | {seconds:.2f} | {100 * seconds / total:.0f} % |")


def top(stats, n):
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:n]
    print(f"\n| function (own time) | calls | own s | with callees s |\n|---|---|---|---|")
    for (path, line, name), (_, calls, own, cum, _) in rows:
        where = f"{os.path.basename(path)}:{line}" if path != "~" else "builtin"
        print(f"| `{name}` ({where}) | {calls} | {own:.2f} | {cum:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--timing", choices=("on", "off"), default="off")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--ops", default="")
    parser.add_argument("--dtypes", default="")
    parser.add_argument("--passes", default="forward")
    parser.add_argument("--shard", default=None, help="I/N: only this slice of the pairs")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", default=None, help="folder for the .prof files")
    args = parser.parse_args()

    out = args.out or tempfile.mkdtemp(prefix="mpsprobe-profile-")
    os.makedirs(out, exist_ok=True)
    prefix = os.path.join(out, f"sweep-{int(time.time())}")
    os.environ["MPSPROBE_PROFILE"] = prefix
    print(_common.machine_line())
    profiler = cProfile.Profile()
    profiler.enable()
    figures = _common.run_sweep(device=args.device, ops=_common.split(args.ops),
                                dtypes=_common.split(args.dtypes), samples=args.samples,
                                timing=args.timing == "on", workers=args.workers,
                                shard=_common.parse_shard(args.shard), passes=args.passes)
    profiler.disable()
    os.remove(figures.pop("db"))
    profiler.dump_stats(prefix + ".parent.prof")
    print(f"sweep: {figures['pairs']} pairs, {figures['cases']} cases, {args.workers} worker(s), "
          f"samples {args.samples}, timing {args.timing}, passes {args.passes}, shard "
          f"{args.shard or 'all'}: {figures['wall_s']:.1f} s wall under the profiler "
          f"(start-up {figures['startup_s']:.1f} s); load {os.getloadavg()[0]:.2f}")
    parent = pstats.Stats(prefix + ".parent.prof")
    table("Parent", parent, PARENT_PARTS, parent.total_tt)
    top(parent, args.top)
    files = sorted(glob.glob(prefix + ".worker-*.prof"))
    if not files:
        print("\nno worker profile was written (a sweep shorter than the save interval?)")
        return
    workers = pstats.Stats(*files)
    table(f"Workers ({len(files)} profiles together)", workers, WORKER_PARTS, workers.total_tt)
    top(workers, args.top)
    print(f"\nprofiles: {out}")


if __name__ == "__main__":
    main()
