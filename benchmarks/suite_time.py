"""The test suite's own time: the full run (what CI runs) and the quick subset.

    python benchmarks/suite_time.py                 # both: -m "not slow", then everything
    python benchmarks/suite_time.py --quick         # the quick subset only
    python benchmarks/suite_time.py --by-file       # every test file in a process of its own

Prints one Markdown row per run: the command, tests passed/skipped/deselected, wall
time, CPU time (pytest and every process it started) and the load average before and
after. On a shared machine the wall time follows the load; the CPU time is what the
run itself costs. --by-file finds files that fail alone (order dependence) and each
file's time; add --durations=0 through --pytest-args to see each test's.
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _common  # noqa: E402


def cpu_of_children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(args):
    """(summary line, wall s, cpu s, load before, load after, exit code) of one pytest run."""
    load_before, cpu_before, started = os.getloadavg()[0], cpu_of_children(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, cpu_of_children() - cpu_before
    lines = [l for l in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
    summary = lines[-1].strip("= ") if lines else (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return summary, wall, cpu, load_before, os.getloadavg()[0], proc.returncode


def minutes(s):
    return f"{int(s // 60)} min {s % 60:.0f} s" if s >= 60 else f"{s:.1f} s"


def row(label, result):
    summary, wall, cpu, before, after, code = result
    flag = "" if code == 0 else f" (exit {code})"
    print(f"| `{label}` | {summary}{flag} | {minutes(wall)} | {minutes(cpu)} | {before:.1f} → {after:.1f} |",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="time the quick subset only")
    parser.add_argument("--by-file", action="store_true", help="each test file alone, one after another")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, one string")
    args = parser.parse_args()
    extra = args.pytest_args.split()
    print(_common.machine_line())
    print("| command | tests | wall | CPU | load before → after |\n|---|---|---|---|---|")
    if args.by_file:
        total_wall = total_cpu = 0.0
        for path in sorted((ROOT / "tests").glob("test_*.py")):
            result = timed([str(path.relative_to(ROOT)), *extra])
            total_wall, total_cpu = total_wall + result[1], total_cpu + result[2]
            row(f"pytest -q {path.relative_to(ROOT)}", result)
        print(f"| every file alone, in all | | {minutes(total_wall)} | {minutes(total_cpu)} | |")
        return
    row('python -m pytest -m "not slow" -q', timed(["-m", "not slow", *extra]))
    if not args.quick:
        row("python -m pytest -q", timed(extra))


if __name__ == "__main__":
    main()
