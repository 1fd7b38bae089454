"""The README's screenshots of the site, from a database built here: rerun to refresh them.

The database (kept with --keep) holds:
- six sweeps through the real pipeline (`mpsprobe run`) on the test suite's fake
  MPS backend (tests/fake_mps.py: MPS's own messages and failure modes on the
  CPU), one per fault set, each filed as an MPS torch release on macOS 15 (and
  one on macOS 13, where bfloat16 is refused and kernels fall back): missing
  kernels fixed in a later release, a wrong-numbers regression, a crash, a hang,
  PyTorch's forced CPU fallbacks. Every history row says "test backend, not a
  real device";
- what PyTorch really declares for MPS in each release (`mpsprobe declared
  --versions`, the macOS wheels downloaded once into the wheel cache), kept
  for the swept ops;
- speed: a small `mpsprobe bench` ladder and a model batch sweep on this
  machine's CPU (CPU against CPU: no crossover by design), or with
  --speed-db the ladders of a real target (`mpsprobe bench --device mps` or
  `--device cuda` elsewhere) merged in instead.

Then `mpsprobe serve` answers and headless Chromium (tests/chromium.py) takes
the grid, an op page (its speed curve too), the speed page and a search at
1400 and 390 px.

    python benchmarks/site_screenshots.py                                   # site/screenshots/*.png
    python benchmarks/site_screenshots.py --speed-db speed-h200.db --keep shots.db
    python benchmarks/site_screenshots.py --from shots.db                  # screenshots only
    python benchmarks/site_screenshots.py --declared installed             # no wheel downloads
    python benchmarks/site_screenshots.py --from shots.db --pages grid,op,search
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

OPS = ("add,mul,exp,sigmoid,cumsum,matmul,histc,nonzero,median,linalg.svd,erfinv,lgamma,"
       "nn.functional.gelu,nn.functional.conv2d,nn.functional.softplus")
# float64 left out: MPS refuses it everywhere, so every cell of "every dtype" would read unsupported.
DTYPES = "float16,bfloat16,float32"
NO_FAULTS = {"not_implemented": [], "wrong": {}, "scaled": {}, "abort": {}, "hang": []}
# (torch release, macOS, faults): older releases miss more. Names are aten ops as the
# fake backend sees them; anything not named runs natively and correctly.
RELEASES = (
    ("2.9.1", "15.5", {"not_implemented": ["aten::histc", "aten::softplus_backward", "aten::median"],
                       "abort": {"aten::erfinv": "assertion"}, "hang": ["aten::lgamma"]}),
    ("2.10.0", "15.5", {"not_implemented": ["aten::histc", "aten::softplus_backward"],
                        "abort": {"aten::erfinv": "assertion"}, "wrong": {"aten::exp": "float16"}}),
    ("2.11.0", "15.6", {"not_implemented": ["aten::histc"], "wrong": {"aten::exp": "float16"}}),
    ("2.12.1", "15.6", {"not_implemented": ["aten::histc"]}),
    ("2.13.0", "15.6", {}),
    ("2.13.0", "13.6", {"macos": "13.5"}),
)
OP_PAGE = "exp"


def run(*args, env=None):
    """One mpsprobe command; its output (exit 1, "something failed", is fine: a sweep of faults)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mpsprobe", *map(str, args)],
                          env=dict(os.environ, **(env or {})), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mpsprobe {' '.join(map(str, args))} failed:\n{done.stdout[-3000:]}")
    print(f"  mpsprobe {args[0]} … {time.perf_counter() - started:.0f} s")
    return done.stdout


def build(path, workdir, speed_db=None, declared_versions="2.9..2.13"):
    from mpsprobe.versions import version_key
    fake = os.path.join(ROOT, "tests", "fake_mps.py")
    parts = []
    for k, (torch_version, macos, faults) in enumerate(RELEASES):
        part = os.path.join(workdir, f"sweep{k}.db")
        out = run("run", "--db", part, "--backend", fake, "--ops", OPS, "--dtypes", DTYPES,
                  "--samples", 2, "--timeout", 3, "--workers", 2, "--no-timing",
                  "--passes", "forward,backward", "--json",
                  env={"FAKE_MPS": json.dumps(dict(NO_FAULTS, **faults))})
        run_id = json.loads(out[out.index("{"):])["run_id"]
        conn = sqlite3.connect(part)
        with conn:
            # Filed as MPS so it lines up with what PyTorch declares for MPS; the
            # backend column keeps "test backend, not a real device" on every row.
            conn.execute("UPDATE runs SET device = 'mps', device_name = NULL, torch_version = ?, torch_version_key = ?, "
                         "os_name = 'macOS', os_version = ?, virtualized = 0, started = ? WHERE id = ?",
                         [torch_version, version_key(torch_version), macos,
                          f"2026-0{k + 1}-01T00:00:00", run_id])
        conn.close()
        parts.append(part)
    if declared_versions:
        declared = os.path.join(workdir, "declared.db")
        # "installed": the installed torch's own declarations (no wheel downloads).
        run("declared", "--db", declared, *(() if declared_versions == "installed"
                                            else ("--versions", declared_versions)))
        conn = sqlite3.connect(declared)
        ops, dtypes = OPS.split(","), DTYPES.split(",")
        with conn:
            conn.execute(f"DELETE FROM declared WHERE op_id NOT IN ({', '.join('?' * len(ops))}) "
                         f"OR dtype NOT IN ({', '.join('?' * len(dtypes))})", ops + dtypes)
        conn.close()
        parts.append(declared)
    if speed_db:
        parts.append(speed_db)
    else:
        speed = os.path.join(workdir, "speed.db")
        # One thread: on a small shared machine, thread wake-ups make multi-threaded
        # sub-millisecond timings jump by 1000x from rung to rung.
        one = {"OMP_NUM_THREADS": "1"}
        run("bench", "--device", "cpu", "--ops", f"{OP_PAGE},add,matmul", "--max-size", "1e6",
            "--reps", 5, "--passes", "forward", "--db", speed, env=one)
        run("check", os.path.join(HERE, "models", "mnist_cnn.py"), "--run", "--device", "cpu",
            "--batch", "1,8,32,64", "--db", speed, "--fail-on", "never", env=one)
        parts.append(speed)
    run("merge", *parts, "-o", path)


# (file name, page, whole page down to 2600 px?): what the README shows, each at 1400 and 390 px.
SHOTS = (("grid", "/-/grid", False), ("op", f"/-/op/{OP_PAGE}", True), ("speed", "/-/speed", True),
         ("search", "/-/search?q=conv", False))


def screenshots(db, folder, pages=None):
    from chromium import Browser, free_port, wait_for
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mpsprobe", "serve", db, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    browser = None
    try:
        wait_for(base + "/-/legend", server, "mpsprobe serve")
        browser = Browser(tempfile.mkdtemp(prefix="chromium-"), hide_scrollbars=True)
        for name, path, full in SHOTS:
            if pages and name not in pages:
                continue
            for width, label in ((1400, "desktop"), (390, "phone")):
                browser.open(base + path, width)
                shot = os.path.join(folder, f"{name}-{label}.png")
                browser.screenshot(shot, full_page=full and 2600)
                print(f"  {shot}")
    finally:
        if browser:
            browser.close()
        server.terminate()
        server.wait(10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "site", "screenshots"), help="folder for the PNGs")
    parser.add_argument("--speed-db", help="a database with `mpsprobe bench` ladders of a real target")
    parser.add_argument("--declared", default="2.9..2.13",
                        help="releases whose declarations to record ('' for none, 'installed' for "
                             "the installed torch's only)")
    parser.add_argument("--keep", help="save the built database here")
    parser.add_argument("--from", dest="source", help="take the screenshots of this database")
    parser.add_argument("--pages", help="only these shots, e.g. grid,op,search (default: all)")
    args = parser.parse_args()
    db = args.source
    if not db:
        workdir = tempfile.mkdtemp(prefix="site-shots-")
        db = args.keep or os.path.join(workdir, "shots.db")
        if os.path.exists(db):
            os.remove(db)
        build(db, workdir, args.speed_db, args.declared)
    os.makedirs(args.out, exist_ok=True)
    screenshots(db, args.out, args.pages and args.pages.split(","))


if __name__ == "__main__":
    main()
