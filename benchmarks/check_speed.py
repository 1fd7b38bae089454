"""How long `mpsprobe check` takes to answer a model from a database: wall time per model.

Each model is checked --repeat times as a fresh process (`python -m mpsprobe check
MODEL --db DB`), as a user runs it: torch's import, the model's trace on the CPU and
the answer from the database all count. The first (cold file cache) round is
not kept. Prints a Markdown row per model: median and range of the kept rounds.

    python benchmarks/check_speed.py [--db DB] [--repeat 3] [--before DIR] [MODEL ...]

--before DIR: another mpsprobe installed there (`pip install --no-deps --target DIR
SOURCE`, e.g. an older commit's `git archive`), timed in the same rounds,
alternating with this one, so both see the same load; a column per code.

Without --db, a database holding one small CPU run is made first (the answer's
source does not change what `check` does, only what it says).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = [ROOT / "tests/models/convnet.py", ROOT / "tests/models/resnet18.py", ROOT / "tests/models/transformer.py"]


def mpsprobe(*args, path=None):
    env = dict(os.environ, PYTHONPATH=path) if path else None
    return subprocess.run([sys.executable, "-m", "mpsprobe", *map(str, args)], capture_output=True, text=True,
                          env=env)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--db", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=None, help="another installation to time alongside")
    options = parser.parse_args()
    folder = tempfile.mkdtemp()
    db = options.db or os.path.join(folder, "cpu.db")
    if not options.db:
        made = mpsprobe("run", "--ops", "add", "--device", "cpu", "--samples", "1", "--no-timing",
                        "--dtypes", "float32", "--passes", "forward", "--db", db)
        if made.returncode:
            sys.exit(made.stderr or made.stdout)
    print(machine_line())
    codes = [("before", options.before), ("this code", None)] if options.before else [("this code", None)]
    print("| model | layers | " + " | ".join(f"{name}: median s (range)" for name, _ in codes) + " | rounds |")
    print("|---|---|" + "---|" * len(codes) + "---|")
    for model in options.models:
        times = {name: [] for name, _ in codes}
        for _ in range(options.repeat + 1):
            for name, path in codes:
                started = time.perf_counter()
                done = mpsprobe("check", model, "--db", db, path=path)
                times[name].append(time.perf_counter() - started)
                if done.returncode not in (0, 1):
                    sys.exit(f"{model} ({name}): {done.stderr.strip() or done.stdout.strip()}")
        cells = []
        for name, _ in codes:
            kept = times[name][1:]
            cells.append(f"{statistics.median(kept):.2f} ({min(kept):.2f}–{max(kept):.2f})")
        print(f"| {Path(model).name} | {_layers(model)} | {' | '.join(cells)} | {options.repeat} |")


def _layers(model):
    """The model's leaf modules (its layers), counted in a process of its own."""
    code = ("import sys; from mpsprobe.modelcheck import load; m = load.load(sys.argv[1]).model; "
            "print(sum(1 for x in m.modules() if not list(x.children())))")
    out = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True)
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    main()
