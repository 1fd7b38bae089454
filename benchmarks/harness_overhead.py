"""Harness overhead: the probe's wall time against the bare cost of the same op calls.

The bare loop runs in ONE process with no isolation and no recording: load
the OpInfo catalogue, make the same seeded samples, copy each to the target,
call the op on the CPU and on the target, synchronise. That is the least any
CPU-vs-device consistency check must do. The probe does the same cases in
isolated workers, plus its float64 "truth" call, comparison, aten capture and
one SQLite commit per pair. Both are run without timing repetitions, unless
--timing asks the probe for its per-case timing (what a default `run` does):
the ratio then includes what that timing costs.

    python benchmarks/harness_overhead.py --device cpu --samples 1 --shard 1/10
    python benchmarks/harness_overhead.py --device cuda --samples 3 --workers 1,16

Prints the bare loop's time split (start-up, samples, op calls) and, per
probe worker count, the probe's wall time and the ratio probe / bare. The
bare loop runs with the intra-op threads a probe worker has (cores / workers).
--repeat N alternates bare loop and probe N times and prints the median ratio
(and its range): on a shared machine, only ratios measured back to back mean
anything. Goal: a ratio of at most 1.3 for a full sweep. Beside the wall times, the CPU
seconds each side used (the probe's parent and workers together): under load from other
work they move far less than wall times do.

--judged also runs, each round, a bare loop that judges each case with the probe's own code, in
process: the float64 truth call, the aten recording and the comparison (not the distribution
tests of random ops). Its time is the least any probe with these verdicts spends: judged / bare
is what the verdicts cost, probe / judged what isolation, the protocol, the database and the
distribution tests add.

    python benchmarks/harness_overhead.py --device cpu --samples 1 --judged --repeat 3
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402


def bare(args):
    """The bare loop (runs in a child process); prints its figures as JSON."""
    started = time.perf_counter()
    import warnings
    warnings.simplefilter("ignore")  # deprecation chatter; the probe's workers log theirs
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)   # as the probe's workers have them
    from mpsprobe.ops import opinfo, samples as sample_tools
    from mpsprobe.engine.plan import in_shard
    device = torch.device(args.device)
    opinfos = opinfo.load_op_db()
    pairs = [p for p in opinfo.list_pairs(_common.split(args.ops), _common.split(args.dtypes), opinfos)
             if in_shard(p, _common.parse_shard(args.shard))]
    ready = time.perf_counter()
    sample_s = call_s = judge_s = 0.0
    cases = failures = 0
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (
        torch.mps.synchronize if device.type == "mps" else (lambda: None))
    for pair in pairs:
        t0 = time.perf_counter()
        op = opinfo.find(opinfos, pair["op"])
        try:
            cases_here = opinfo.samples(op, opinfo.parse_dtype(pair["dtype"]), args.samples)
        except Exception:
            cases_here = []
            failures += 1
        t1 = time.perf_counter()
        sample_s += t1 - t0
        for sample in cases_here:
            cases += 1
            try:
                cpu_args = sample_tools.call_args(sample)
                cpu_out = _call(op.op, cpu_args)
                target_out = _call(op.op, sample_tools.to_device(cpu_args, device))
                sync()
                if args.judged:
                    judge_s += _judge(op.op, cpu_args, cpu_out, target_out, opinfo.parse_dtype(pair["dtype"]))
            except Exception:
                failures += 1
        call_s += time.perf_counter() - t1
    wall = time.perf_counter() - started
    print(json.dumps({"threads": torch.get_num_threads(), "pairs": len(pairs), "cases": cases, "failures": failures, "wall_s": wall,
                      "startup_s": ready - started, "samples_s": sample_s, "calls_s": call_s,
                      "judge_s": judge_s}))


def _call(op, args):
    inp, rest, kwargs = args
    return op(inp, *rest, **kwargs)


def _judge(op, cpu_args, cpu_out, target_out, dtype):
    """--judged: the seconds of what the probe adds to each case to judge it, in the probe's own
    code, with none of its isolation or bookkeeping: the float64 truth call, the aten recording
    (a call of its own) and the comparison."""
    from mpsprobe.engine.aten import recorded_once
    from mpsprobe.engine.verdict import compare
    from mpsprobe.ops import samples as sample_tools
    started = time.perf_counter()
    wide = sample_tools.upcast(cpu_args, dtype)
    truth = _call(op, wide) if wide is not None else None

    def record(recorder):
        with recorder:
            _call(op, sample_tools.to_device(cpu_args, "cpu"))
    recorded_once(None, None, record)
    compare(target_out, cpu_out, truth, dtype)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--workers", default="1", help="comma-separated probe worker counts")
    parser.add_argument("--ops", default="")
    parser.add_argument("--dtypes", default="")
    parser.add_argument("--shard", default=None, help="I/N: only this slice of the pairs")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of bare loop and probe, alternated")
    parser.add_argument("--timing", action="store_true", help="the probe times cases, as `run` does by default")
    parser.add_argument("--judged", action="store_true",
                        help="the bare loop also judges each case as the probe does (truth call, aten "
                             "recording, comparison), in process: the least a probe with these verdicts costs")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        return bare(args)

    print(_common.machine_line())
    command = [sys.executable, os.path.abspath(__file__), "--bare", "--device", args.device,
               "--samples", str(args.samples), "--ops", args.ops, "--dtypes", args.dtypes]
    if args.shard:
        command += ["--shard", args.shard]
    worker_counts = [int(w) for w in _common.split(args.workers)]
    probes = {w: [] for w in worker_counts}
    # The loops and the probe alternate, so all see the same spells of load from other work.
    for round_ in range(args.repeat):
        for workers in worker_counts:
            b = _bare(command, workers)
            _say_bare(round_, "bare loop", b, args)
            j = None
            if args.judged:
                j = _bare(command + ["--judged"], workers)
                _say_bare(round_, "judged bare loop", j, args)
            before = _cpu_s(resource.RUSAGE_SELF) + _cpu_s(resource.RUSAGE_CHILDREN)
            p = _common.run_sweep(device=args.device, ops=_common.split(args.ops),
                                  dtypes=_common.split(args.dtypes), samples=args.samples,
                                  timing=args.timing, workers=workers, shard=_common.parse_shard(args.shard))
            p["cpu_s"] = _cpu_s(resource.RUSAGE_SELF) + _cpu_s(resource.RUSAGE_CHILDREN) - before
            os.remove(p["db"])
            probes[workers].append((b, j, p))
            judged = f"; against the judged loop {p['wall_s'] / j['wall_s']:.2f}" if j else ""
            print(f"round {round_ + 1}: probe, {workers} worker(s), timing {'on' if args.timing else 'off'}: "
                  f"{p['cases']} cases in "
                  f"{p['wall_s']:.1f} s (start-up {p['startup_s']:.1f} s, first case at {p['first_case_s']:.1f} s); ratio "
                  f"{p['wall_s'] / b['wall_s']:.2f}{judged}; CPU s bare {b['cpu_s']:.1f}, probe {p['cpu_s']:.1f}, "
                  f"ratio {p['cpu_s'] / b['cpu_s']:.2f}; load {os.getloadavg()[0]:.2f}", flush=True)
    print("| device | samples | shard | workers | cases | rounds | bare s (start-up + samples + op calls) "
          "| probe s (start-up; first case) | probe / bare | after start-up | CPU s bare, probe | CPU probe / bare |"
          + (" judged bare s | judged / bare | probe / judged |" if args.judged else "")
          + "\n|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.judged else ""))
    for workers, runs in probes.items():
        ratios = [p["wall_s"] / b["wall_s"] for b, _, p in runs]
        # Start-up apart on both sides alike: the bare loop's ends once OpInfo's database is
        # loaded, the probe's once its first case is answered (its worker loads the database
        # then; the cached plan opens the run before it).
        steady = [(p["wall_s"] - p["first_case_s"]) / max(1e-9, b["wall_s"] - b["startup_s"]) for b, _, p in runs]
        cpu = [p["cpu_s"] / b["cpu_s"] for b, _, p in runs]
        b = _median_run([b for b, _, _ in runs])
        p = _median_run([p for _, _, p in runs])
        judged = ""
        if args.judged:
            j = _median_run([j for _, j, _ in runs])
            costs = [j["wall_s"] / b["wall_s"] for b, j, _ in runs]
            against = [p["wall_s"] / j["wall_s"] for _, j, p in runs]
            judged = (f" {j['wall_s']:.1f} ({j['startup_s']:.1f} + {j['samples_s']:.1f} + {j['calls_s']:.1f}, "
                      f"judging {j['judge_s']:.1f}) | {_spread(costs)} | **{_spread(against)}** |")
        print(f"| {args.device} | {args.samples} | {args.shard or 'all'} | {workers} | {p['cases']} "
              f"| {len(runs)} | {b['wall_s']:.1f} ({b['startup_s']:.1f} + {b['samples_s']:.1f} + "
              f"{b['calls_s']:.1f}) | {p['wall_s']:.1f} ({p['startup_s']:.1f}; {p['first_case_s']:.1f}) "
              f"| **{_spread(ratios)}** | {statistics.median(steady):.2f} | {b['cpu_s']:.1f}, {p['cpu_s']:.1f} "
              f"| {_spread(cpu)} |{judged}", flush=True)


def _spread(values):
    """A median and its range: "1.44 (1.40–1.65)"."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def _say_bare(round_, name, b, args):
    judging = f", judging {b['judge_s']:.1f} s of them" if b.get("judge_s") else ""
    print(f"round {round_ + 1}: {name} ({args.device}, samples {args.samples}, shard "
          f"{args.shard or 'all'}, {b['threads']} threads): {b['pairs']} pairs, {b['cases']} "
          f"cases in {b['wall_s']:.1f} s = start-up {b['startup_s']:.1f} s + samples "
          f"{b['samples_s']:.1f} s + op calls {b['calls_s']:.1f} s{judging} ({b['failures']} raised); "
          f"load {os.getloadavg()[0]:.2f}", flush=True)


def _bare(command, workers):
    """One bare loop, with the intra-op threads a probe worker of `workers` has."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    before = _cpu_s(resource.RUSAGE_CHILDREN)
    out = subprocess.run(command + ["--threads", str(threads)], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]), cpu_s=_cpu_s(resource.RUSAGE_CHILDREN) - before)


def _cpu_s(who):
    """User and system CPU seconds of this process (RUSAGE_SELF) or of its reaped children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _median_run(runs):
    """The run of median wall time."""
    return sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]


if __name__ == "__main__":
    main()
