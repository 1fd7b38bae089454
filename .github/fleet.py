"""The probe fleet's two steps, the same in a workflow and on a laptop.

    python .github/fleet.py matrix    # prints matrix=JSON (the probe workflow's jobs)
    python .github/fleet.py probe     # one job: run a shard, submit it, verify the bundle

Settings come from the environment (the workflow sets them from its inputs):

FLEET_RUNNERS   runner labels, JSON list or comma-separated. Labels of GitHub-hosted
                macOS runners (macos-14, macos-15, macos-15-xlarge, macos-latest …)
                are virtual machines with a paravirtual GPU: a smoke fleet, never
                bare-metal truth. Any other label is taken for a self-hosted Mac.
FLEET_TORCH     torch versions for `mpsprobe run --torch` (current, 2.12.0, nightly …)
FLEET_SHARDS    how many shards each (runner, torch) sweep is split into
FLEET_RUNNER, FLEET_TORCH_ONE, FLEET_SHARD   one job's cell of the matrix (probe)
FLEET_OPS, FLEET_SAMPLES, FLEET_TIMEOUT      what each job sweeps (default: everything, 1 sample)
FLEET_OUT       folder for the job's bundle (default: bundles)
MPSPROBE_RUN_ARGS  more options for `mpsprobe run` (the simulated fleet adds its test backend)
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HOSTED = re.compile(r"^macos-(\d+|latest)(-(large|xlarge))?$")


def _list(text, default):
    text = (text or "").strip()
    if not text:
        return default
    if text.startswith("["):
        return [str(x) for x in json.loads(text)]
    return [x.strip() for x in text.split(",") if x.strip()]


def paravirtual(label):
    """True for a GitHub-hosted macOS runner's label: a VM with Apple's paravirtual GPU."""
    return bool(HOSTED.match(label))


def matrix(environ):
    runners = _list(environ.get("FLEET_RUNNERS"), ["macos-14", "macos-15"])
    versions = _list(environ.get("FLEET_TORCH"), ["current", "nightly"])
    shards = int(environ.get("FLEET_SHARDS") or 1)
    if shards < 1:
        raise SystemExit(f"FLEET_SHARDS must be at least 1 (got {shards})")
    return {"include": [{"runner": r, "paravirtual": paravirtual(r), "torch": t, "shard": i,
                         "shards": shards}
                        for r in runners for t in versions for i in range(1, shards + 1)]}


def _mpsprobe():
    """The mpsprobe beside this Python (a virtual environment's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpsprobe")
    return here if os.path.exists(here) else shutil.which("mpsprobe") or "mpsprobe"


def _call(args):
    print("+ " + shlex.join(args), flush=True)
    began = time.monotonic()
    code = subprocess.call(args)
    print(f"  ({args[1]}: exit {code}, {time.monotonic() - began:.1f} s)", flush=True)
    if code:
        raise SystemExit(code)


def probe(environ):
    """Sweep one shard on this machine, write its bundle and verify it; returns the bundle."""
    label = environ.get("FLEET_RUNNER") or "laptop"
    version = environ.get("FLEET_TORCH_ONE") or "current"
    shard, shards = int(environ.get("FLEET_SHARD") or 1), int(environ.get("FLEET_SHARDS") or 1)
    out = environ.get("FLEET_OUT") or "bundles"
    os.makedirs(out, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{label}-torch-{version}-shard-{shard}of{shards}")
    db = os.path.join(out, f"{name}.db")
    run = [_mpsprobe(), "run", "--db", db, "--device", "mps", "--torch", version,
           "--shard", f"{shard}/{shards}", "--samples", environ.get("FLEET_SAMPLES") or "1",
           "--workers", "1", "--runner-label", label]
    if environ.get("FLEET_OPS"):
        run += ["--ops", environ["FLEET_OPS"]]
    if environ.get("FLEET_TIMEOUT"):
        run += ["--timeout", environ["FLEET_TIMEOUT"]]
    run += shlex.split(environ.get("MPSPROBE_RUN_ARGS") or "")
    _call(run)
    # The run's id in the name: a job run again (or two releases a laptop calls "current") never overwrites.
    before = set(os.listdir(out))
    _call([_mpsprobe(), "submit", "--db", db, "-o", os.path.join(out, f"{name}-{{run}}.bundle.json.gz")])
    (written,) = set(os.listdir(out)) - before
    bundle = os.path.join(out, written)
    _call([_mpsprobe(), "verify", bundle])
    for leftover in (db, db + "-wal", db + "-shm"):   # the bundle carries the run
        if os.path.exists(leftover):
            os.remove(leftover)
    return bundle


def main(argv):
    if argv[1:] == ["matrix"]:
        print("matrix=" + json.dumps(matrix(os.environ), separators=(",", ":")))
    elif argv[1:] == ["probe"]:
        probe(os.environ)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
