"""First answers: how long each command takes to print its first line and to answer,
from a warm catalogue cache (the cache is warmed first, in its own folder).

    python benchmarks/first_answers.py [--repeat 3]

Each row: the command, seconds to its first line of output, seconds to its exit
(the answer), and whether PyTorch's OpInfo database was imported by the command's
own process (-X importtime). Medians over --repeat runs, the range beside them.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

OPINFO = "torch.testing._internal.common_methods_invocations"


def timed(args, env):
    """(seconds to the first line, seconds to exit, OpInfo imported here?) of `mpsprobe ARGS`."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "mpsprobe", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first, lines = None, []
    for line in proc.stdout:
        if first is None and not line.startswith("import time:"):
            first = time.perf_counter() - started
        lines.append(line)
    proc.wait()
    done = time.perf_counter() - started
    return first if first is not None else done, done, any(OPINFO in line for line in lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(_common.machine_line())
    folder = tempfile.mkdtemp(prefix="mpsprobe-first-")
    env = dict(os.environ, MPSPROBE_CACHE=os.path.join(folder, "cache"))
    db = os.path.join(folder, "x.db")
    base = ["run", "--db", db, "--device", "cpu", "--workers", "1", "--no-timing"]
    complete = base + ["--ops", "add", "--dtypes", "float32", "--samples", "1", "--passes", "forward"]
    cold = timed(["ops", "add"], env)
    print(f"cold cache: `ops add` {cold[1]:.1f} s (reads OpInfo once, then caches it)")
    subprocess.run([sys.executable, "-m", "mpsprobe", *complete], env=env, check=True, capture_output=True)
    commands = {"ops conv": ["ops", "conv"],
                "run, a refused name (conv2d)": base + ["--ops", "conv2d"],
                "run, a complete run again": complete,
                "ops --help": ["ops", "--help"]}
    print("| command | first line s | answer s | OpInfo imported by the command |\n|---|---|---|---|")
    for name, command in commands.items():
        runs = [timed(command, env) for _ in range(args.repeat)]
        firsts, answers = [r[0] for r in runs], [r[1] for r in runs]
        print(f"| {name} | {statistics.median(firsts):.2f} ({min(firsts):.2f}-{max(firsts):.2f}) "
              f"| {statistics.median(answers):.2f} ({min(answers):.2f}-{max(answers):.2f}) "
              f"| {'yes' if any(r[2] for r in runs) else 'no'} |", flush=True)
    print(f"load {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
