"""A simulated probe fleet, end to end, timed: the probe workflow's own steps for
three Macs on the fake MPS test backend (an M1 on macOS 13, an M2 on macOS 14,
an M4 on macOS 15 inside a GitHub-hosted VM with the paravirtual GPU) x two torch
releases (simulated: the fake backend files its runs under 2.12.0 and 2.13.0;
torch 2.13 runs underneath), then the publish workflow's: verify, merge, serve.

Every job runs `python .github/fleet.py probe` exactly as the workflow does
(sweep one shard, submit the bundle, verify it); only MPSPROBE_RUN_ARGS adds
the test backend. Nothing here is a measurement of a Mac: it times the
fleet's machinery (the sweep's harness, bundles, verify, merge, the site).

    python benchmarks/fleet_simulated.py [--ops 'add,exp,mul,sum,nn.functional.relu'] [--shards 1]
"""
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_line

ROOT = Path(__file__).resolve().parent.parent
FAKE_MPS = ROOT / "tests" / "fake_mps.py"
MACHINES = {
    "macos-m1-13": {"chip": "Apple M1", "gpu_cores": 8, "macos": "13.6.7", "os_build": "22G720",
                    "memory_bytes": 16 << 30, "virtualized": 0},
    "macos-m2-14": {"chip": "Apple M2", "gpu_cores": 10, "macos": "14.7.1", "os_build": "23H222",
                    "memory_bytes": 24 << 30, "virtualized": 0},
    "macos-15": {"chip": "Apple M4 (Virtual)", "gpu": "Apple Paravirtual device", "gpu_cores": 10,
                 "macos": "15.7.2", "os_build": "24G325", "memory_bytes": 7 << 30, "virtualized": 1},
}
TORCH = {"2.12.0": {"wrong": {"aten::exp": "float32"}}, "2.13.0": {"wrong": {}}}


def job(out, label, release, shard, shards, args):
    machine = dict(MACHINES[label], torch=release)
    env = dict(os.environ, FLEET_RUNNER=label, FLEET_TORCH_ONE="current", FLEET_SHARD=str(shard),
               FLEET_SHARDS=str(shards), FLEET_OPS=args.ops, FLEET_SAMPLES=str(args.samples), FLEET_OUT=str(out),
               MPSPROBE_RUN_ARGS=f"--backend {FAKE_MPS} --dtypes {args.dtypes} --timeout 10",
               FAKE_MPS=json.dumps(dict(TORCH[release], machine=machine)))
    env.pop("MPSPROBE_RUNNER_LABEL", None)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / ".github" / "fleet.py"), "probe"], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stdout + done.stderr)
    # fleet.py says how long each command took: "  (run: exit 0, 12.3 s)".
    steps = {m.group(1): float(m.group(2)) for m in re.finditer(r"\((\w+): exit 0, ([\d.]+) s\)", done.stdout)}
    return time.perf_counter() - began, steps


def timed(fn):
    began = time.perf_counter()
    value = fn()
    took = time.perf_counter() - began
    return value, took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="add,exp,mul,sum,nn.functional.relu")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16,float64")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args()
    import mpsprobe
    from mpsprobe.site import make_datasette

    print(machine_line())
    print(f"fleet: {len(MACHINES)} simulated Macs x {len(TORCH)} torch releases x {args.shards} shards; "
          f"ops {args.ops}; dtypes {args.dtypes}; {args.samples} sample(s)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bundles"
        print("\n| job (the probe workflow's step) | wall s | run | submit | verify |\n|---|---|---|---|---|")
        total = 0.0
        for label in MACHINES:
            for release in TORCH:
                for shard in range(1, args.shards + 1):
                    took, steps = job(out, label, release, shard, args.shards, args)
                    total += took
                    print(f"| {label} torch {release} shard {shard}/{args.shards} | {took:.1f} | "
                          + " | ".join(f"{steps.get(k, float('nan')):.1f}" for k in ("run", "submit", "verify")) + " |")
        bundles = sorted(out.glob("*.bundle.json.gz"))
        sizes = [b.stat().st_size for b in bundles]
        print(f"| all {len(bundles)} jobs, one after another | {total:.1f} | | | |")
        verdicts, verify_s = timed(lambda: [mpsprobe.verify(b) for b in bundles])
        assert all(v.ok for v in verdicts), [v.problems for v in verdicts if not v.ok]
        results = sum(v.rows for v in verdicts)
        fleet = Path(tmp) / "fleet.db"
        _, merge_s = timed(lambda: mpsprobe.merge(bundles, fleet))
        ds = make_datasette(str(fleet))
        asyncio.run(ds.invoke_startup())

        def page(path):
            began = time.perf_counter()
            response = asyncio.run(ds.client.get(path))
            assert response.status_code == 200, path
            return (time.perf_counter() - began) * 1000, len(response.content)
        grid_ms, grid_bytes = page("/-/grid")
        op_ms, op_bytes = page("/-/op/add")
        groups = list(dict.fromkeys(c["group"] for c in asyncio.run(ds.client.get("/-/grid.json")).json()["columns"]))
        print("\n| publish step | figure |\n|---|---|")
        print(f"| bundles | {len(bundles)}, {results} results, {min(sizes) / 1024:.1f}–{max(sizes) / 1024:.1f} KiB each (gzip) |")
        print(f"| verify all | {verify_s:.2f} s |")
        print(f"| merge all into one database | {merge_s:.2f} s, {fleet.stat().st_size / 1024:.0f} KiB |")
        print(f"| grid page (first render) | {grid_ms:.0f} ms, {grid_bytes / 1024:.0f} KiB; groups: {'; '.join(groups)} |")
        print(f"| op page add (first render) | {op_ms:.0f} ms, {op_bytes / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
