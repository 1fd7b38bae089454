"""The bundled knowledge base: its size, its releases, and (with --rebuild) its build time.

Prints Markdown table rows: one per release (aten functions with an MPS kernel,
composite, neither; declared (op, dtype) rows; files not read), then the file's
size against its budget and the time a fresh-install `check` takes to answer a
float64 model from it (no database). With --rebuild, builds the whole range
again with the project's own command into a scratch file (wheels from
$MPSPROBE_WHEEL_CACHE, downloaded when absent) and says whether its bytes equal
the shipped file's.

    python benchmarks/knowledge_base.py
    MPSPROBE_WHEEL_CACHE=~/wheels python benchmarks/knowledge_base.py --rebuild 2.0..2.15
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from _common import machine_line

WEAK = '''import torch


class Weak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(4, dtype=torch.float64))

    def forward(self, x):
        y = x.double() * self.scale
        return torch.linalg.eigh(y @ y.T).eigenvalues.float()


def build():
    return Weak(), torch.randn(4, 4)
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", metavar="RANGE", default=None,
                        help="also rebuild these releases (e.g. 2.0..2.15) and compare the bytes")
    args = parser.parse_args()
    from mpsprobe.db.query import knowledge
    from mpsprobe.ops.declared import bundle
    print(machine_line())
    kb = knowledge.load()
    print(f"\nbuilt with torch {kb['built_with']['opinfo_torch']}'s OpInfo list, "
          f"macOS gates at {kb['built_with']['macos']}\n")
    print("| release | MPS kernels | composite | neither | declared rows | not read |")
    print("|---|---|---|---|---|---|")
    for release in knowledge.releases(kb):
        entry = kb["releases"][release]
        k = entry["kernels"]
        failed = ", ".join(sorted(s for s, why in entry["sources"].items() if why)) or "-"
        print(f"| {release} | {len(k['mps'])} | {len(k['composite'])} | {len(k['none'])} | "
              f"{len(entry['declared'])} | {failed} |")
    size = os.path.getsize(knowledge.DEFAULT)
    print(f"\nfile: {size / 1e6:.2f} MB gzipped JSON (budget {bundle.SIZE_BUDGET / 2**20:.0f} MiB), "
          f"{len(kb['releases'])} releases, {len(kb['rules'])} MPS-wide rules")

    with tempfile.TemporaryDirectory() as folder:
        model = os.path.join(folder, "weak_ops.py")
        with open(model, "w") as f:
            f.write(WEAK)
        cli = [sys.executable, "-m", "mpsprobe", "check", model]
        started = time.monotonic()
        done = subprocess.run(cli, cwd=folder, capture_output=True, text=True)
        print(f"fresh-install check of a float64 model (no database): exit {done.returncode}, "
              f"{time.monotonic() - started:.1f} s wall (torch import and capture included)")
        if args.rebuild:
            out = os.path.join(folder, "kb.json.gz")
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "mpsprobe", "declared", "--versions",
                                   args.rebuild, "--bundle", out], capture_output=True, text=True)
            took = time.monotonic() - started
            if done.returncode != 0:
                print(f"rebuild failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
                return
            with open(out, "rb") as a, open(knowledge.DEFAULT, "rb") as b:
                same = a.read() == b.read()
            print(f"rebuild of {args.rebuild}: {took:.0f} s, {os.path.getsize(out) / 1e6:.2f} MB, "
                  f"bytes {'identical to' if same else 'DIFFERENT from'} the shipped file")


if __name__ == "__main__":
    main()
