"""How long `mpsprobe check` takes to answer a model from a database: wall time per model.

Each model is checked --repeat times as a fresh process (`python -m mpsprobe check
MODEL --db DB`), as a user runs it: torch's import, the model's trace on the CPU and
the answer from the database all count. The first (cold file cache) round is
not kept. Prints a Markdown row per model: median and range of the kept rounds.

    python benchmarks/check_speed.py [--db DB] [--repeat 3] [MODEL ...]

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


def mpsprobe(*args):
    return subprocess.run([sys.executable, "-m", "mpsprobe", *map(str, args)], capture_output=True, text=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--db", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    folder = tempfile.mkdtemp()
    db = options.db or os.path.join(folder, "cpu.db")
    if not options.db:
        made = mpsprobe("run", "--ops", "add", "--device", "cpu", "--samples", "1", "--no-timing",
                        "--dtypes", "float32", "--passes", "forward", "--db", db)
        if made.returncode:
            sys.exit(made.stderr or made.stdout)
    print(machine_line())
    print("| model | layers | median s | range s | rounds |")
    print("|---|---|---|---|---|")
    for model in options.models:
        times = []
        for _ in range(options.repeat + 1):
            started = time.perf_counter()
            done = mpsprobe("check", model, "--db", db)
            times.append(time.perf_counter() - started)
            if done.returncode not in (0, 1):
                sys.exit(f"{model}: {done.stderr.strip() or done.stdout.strip()}")
        kept = times[1:]
        layers = _layers(model)
        print(f"| {Path(model).name} | {layers} | {statistics.median(kept):.2f} | "
              f"{min(kept):.2f}–{max(kept):.2f} | {len(kept)} |")


def _layers(model):
    """The model's leaf modules (its layers), counted in a process of its own."""
    code = ("import sys; from mpsprobe.modelcheck import load; m = load.load(sys.argv[1]).model; "
            "print(sum(1 for x in m.modules() if not list(x.children())))")
    out = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True)
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    main()
