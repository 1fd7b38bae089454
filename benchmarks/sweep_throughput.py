"""Sweep throughput and memory: cases per second, wall time, peak RSS.

Runs a fresh sweep for every combination of --workers and --timing, each in a
new process (so start-up and memory are measured from zero), and prints one
Markdown table row per combination.

    python benchmarks/sweep_throughput.py --device cpu --samples 1 --workers 1,2
    python benchmarks/sweep_throughput.py --device cuda --samples 3 --workers 16 --timing both

--shard I/N measures a slice (for one worker, where a full sweep is long);
cases per second carries over, wall time is for the slice only. Forward
cases only unless --passes says otherwise (the default run probes every pass).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

HEADER = ("| device | samples | timing | workers | shard | pairs | cases | wall s | start-up s "
          "| first case s | cases/s | parent peak MiB | largest worker MiB | all workers MiB |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def one(args):
    figures = _common.run_sweep(
        device=args.device, ops=_common.split(args.ops), dtypes=_common.split(args.dtypes),
        samples=args.samples, timing=args.timing == "on", workers=args.workers_one,
        shard=_common.parse_shard(args.shard), timeout=args.timeout, db_path=args.keep_db,
        passes=args.passes)
    if not args.keep_db:
        os.remove(figures.pop("db"))
    print(json.dumps(figures))


def row(args, timing, workers, f):
    workers = workers or f"default ({f['workers']})"
    return (f"| {args.device} | {args.samples} | {timing} | {workers} | {args.shard or 'all'} "
            f"| {f['pairs']} | {f['cases']} | {f['wall_s']:.1f} | {f['startup_s']:.1f} "
            f"| {f['first_case_s']:.1f} | {f['cases_per_s']:.1f} | {f['parent_peak_mib']:.0f} | {f['worker_peak_mib']:.0f} "
            f"| {f['workers_total_peak_mib']:.0f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--timing", choices=("on", "off", "both"), default="off")
    parser.add_argument("--workers", default="1", help="comma-separated worker counts")
    parser.add_argument("--ops", default="", help="op names or globs (default: all)")
    parser.add_argument("--dtypes", default="")
    parser.add_argument("--shard", default=None, help="I/N: only this slice of the pairs")
    parser.add_argument("--passes", default="forward", help="passes to run (default: forward only)")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--keep-db", default=None, help="record into this DB and keep it")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers-one", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args)

    print(_common.machine_line())
    print(HEADER, flush=True)
    timings = ("on", "off") if args.timing == "both" else (args.timing,)
    for timing in timings:
        for workers in [int(w) for w in _common.split(args.workers)]:
            command = [sys.executable, os.path.abspath(__file__), "--one", "--device", args.device,
                       "--samples", str(args.samples), "--timing", timing,
                       "--workers-one", str(workers), "--ops", args.ops, "--dtypes", args.dtypes,
                       "--timeout", str(args.timeout), "--passes", args.passes]
            if args.keep_db:
                root, ext = os.path.splitext(args.keep_db)
                command += ["--keep-db", f"{root}-s{args.samples}-{timing}-w{workers}{ext or '.db'}"]
            if args.shard:
                command += ["--shard", args.shard]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
            if done.returncode:
                print(f"| {args.device} | {args.samples} | {timing} | {workers} | failed "
                      f"(exit {done.returncode}) |", flush=True)
                continue
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(row(args, timing, workers, figures), flush=True)
    print(f"torch {figures['env']['torch_version']}, target {figures['env']['device_name']}"
          if 'figures' in locals() else "")


if __name__ == "__main__":
    main()
