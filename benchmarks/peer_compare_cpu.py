"""Peer comparison: PyTorch's own CPU-consistency test against `mpsprobe run`, same ops and dtypes.

PyTorch's test/test_ops.py has `TestCommon.test_compare_cpu` (a slow test,
CUDA/XPU only): for each OpInfo op, in one dtype the CPU and the device
share, it runs every reference input on both and asserts they agree
(atol = rtol = 1e-3). It records pass/fail/skip per (op, dtype), nothing else.

This script, in one invocation:
1. collects those tests (`pytest --collect-only`) and reads which (op, dtype)
   pairs they cover;
2. runs them with pytest (PYTORCH_TEST_WITH_SLOW=1), timing the whole command;
3. runs mpsprobe on exactly the same (op, dtype) pairs on the same device;
and prints both wall times, their ratio, and what each recorded.

test_ops.py is not in the torch wheel; get the file for your torch version
(it needs nothing else from test/: its imports come from torch.testing._internal),
or leave --test-ops out to run compare_cpu_like_pytorch.py, the same check
written on PyTorch's own test harness:

    curl -LO https://raw.githubusercontent.com/pytorch/pytorch/v2.11.0/test/test_ops.py

    python benchmarks/peer_compare_cpu.py --test-ops test_ops.py --device cuda --workers 16
    python benchmarks/peer_compare_cpu.py --test-ops test_ops.py --device cuda --shard 1/4

--shard I/N keeps the ops whose name hashes to slice I (both tools get the
same slice). Python references (`_refs.*` entries) have no mpsprobe
counterpart: PyTorch runs them, mpsprobe does not; they are counted apart.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

# A pytest plugin, written to a temporary folder: keeps only the listed test ids.
SELECT_PLUGIN = '''
import os
def pytest_collection_modifyitems(config, items):
    with open(os.environ["PEER_SELECT_FILE"]) as f:
        wanted = set(f.read().split())
    kept = [i for i in items if i.name in wanted]
    config.hook.pytest_deselected(items=[i for i in items if i.name not in wanted])
    items[:] = kept
'''


def formatted_names():
    """{PyTorch test-name fragment: mpsprobe op id} for every OpInfo op."""
    from mpsprobe.ops import opinfo
    names = {}
    for o in opinfo.load_op_db():
        variant = getattr(o, "variant_test_name", "") or ""
        text = o.name.replace(".", "_") + (("_" + variant.replace(".", "_")) if variant else "")
        names[text] = opinfo.op_key(o)
    return names


def pytest_env(extra=None):
    env = dict(os.environ, PYTORCH_TEST_WITH_SLOW="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra or {})
    return env


def collect(test_ops):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", test_ops, "-k", "test_compare_cpu",
                           "--collect-only", "-q", "-p", "no:cacheprovider"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=pytest_env())
    names = [line.rsplit("::", 1)[-1] for line in done.stdout.splitlines() if "::test_compare_cpu_" in line]
    if not names:
        sys.exit(f"no test_compare_cpu tests collected from {test_ops}:\n{done.stdout[-3000:]}")
    return names, time.perf_counter() - started


def in_slice(fragment, shard):
    if not shard:
        return True
    i, n = shard
    return zlib.crc32(fragment.encode()) % n == i - 1


def run_pytorch(test_ops, names, folder):
    select = os.path.join(folder, "select.txt")
    with open(select, "w") as f:
        f.write("\n".join(names))
    with open(os.path.join(folder, "peer_select.py"), "w") as f:
        f.write(SELECT_PLUGIN)
    junit = os.path.join(folder, "junit.xml")
    env = pytest_env({"PEER_SELECT_FILE": select,
                      "PYTHONPATH": os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))})
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", test_ops, "-k", "test_compare_cpu",
                           "-p", "peer_select", "-p", "no:cacheprovider", "-q", "--tb=no",
                           f"--junitxml={junit}"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.perf_counter() - started
    counts = collections.Counter()
    if os.path.exists(junit):
        for case in ET.parse(junit).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            counts["failed" if "failure" in kinds else "error" if "error" in kinds
                   else "skipped" if "skipped" in kinds else "passed"] += 1
    else:
        counts["no report (pytest exit %d)" % done.returncode] += 1
    return wall, counts, done.stdout.strip().splitlines()[-1:] or [""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test-ops", default=os.path.join(HERE, "compare_cpu_like_pytorch.py"),
                        help="path to PyTorch's test/test_ops.py for the installed torch "
                             "(default: compare_cpu_like_pytorch.py, the same check on "
                             "PyTorch's harness, for when that file cannot be had)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=0, help="mpsprobe workers (0: one per core)")
    parser.add_argument("--samples", type=int, default=3, help="mpsprobe samples per (op, dtype)")
    parser.add_argument("--timing", action="store_true", help="let mpsprobe time the ops too")
    parser.add_argument("--shard", default=None, help="I/N: only this slice of the ops")
    args = parser.parse_args()
    shard = _common.parse_shard(args.shard)

    print(_common.machine_line())
    kind = args.device.split(":")[0]
    test_name = re.compile(rf"^test_compare_cpu_(.+)_{kind}_(\w+)$")
    names, collect_s = collect(os.path.abspath(args.test_ops))
    op_ids = formatted_names()
    pairs, refs, unknown, selected = set(), 0, [], []
    for name in names:
        match = test_name.search(name)
        if not match or not in_slice(match.group(1), shard):
            continue
        selected.append(name)
        fragment, dtype = match.group(1), match.group(2)
        if fragment.startswith("_refs_"):
            refs += 1
        elif fragment in op_ids:
            pairs.add((op_ids[fragment], dtype))
        else:
            unknown.append(fragment)
    print(f"PyTorch test_compare_cpu: {len(names)} tests collected in {collect_s:.0f} s; "
          f"{len(selected)} in this slice = {len(pairs)} (op, dtype) pairs mpsprobe also has "
          f"+ {refs} Python-reference tests + {len(unknown)} not matched"
          + (f" (e.g. {', '.join(unknown[:3])})" if unknown else ""), flush=True)

    with tempfile.TemporaryDirectory(prefix="mpsprobe-peer-") as folder:
        torch_wall, torch_counts, torch_tail = run_pytorch(os.path.abspath(args.test_ops),
                                                           selected, folder)
    print(f"PyTorch: {torch_wall:.1f} s wall; {dict(torch_counts)}; pytest says: {torch_tail[0]}",
          flush=True)

    probe = _common.run_sweep(device=args.device, samples=args.samples, timing=args.timing,
                              workers=args.workers,
                              pairs_filter=lambda p: (p["op"], p["dtype"]) in pairs)
    os.remove(probe["db"])
    counts = {k: v for k, v in probe["counts"].items() if v}
    print(f"mpsprobe: {probe['wall_s']:.1f} s wall; {probe['pairs']} pairs, {probe['cases']} cases; "
          f"{counts}", flush=True)
    print("\n| tool | pairs | wall s | records |\n|---|---|---|---|")
    print(f"| PyTorch test_compare_cpu | {len(selected)} tests | {torch_wall:.1f} "
          f"| pass/fail/skip per (op, dtype): {dict(torch_counts)} |")
    print(f"| mpsprobe run (samples {args.samples}{', timing' if args.timing else ''}) "
          f"| {probe['pairs']} | {probe['wall_s']:.1f} | a status per case ({counts}), with "
          f"errors, aten ops, fallbacks, max abs/rel error{', timings' if args.timing else ''} |")
    print(f"\nmpsprobe / PyTorch wall time: {probe['wall_s'] / torch_wall:.2f}")
    print(json.dumps({"pytorch_wall_s": torch_wall, "pytorch": dict(torch_counts),
                      "mpsprobe_wall_s": probe["wall_s"], "mpsprobe_cases": probe["cases"],
                      "mpsprobe": counts}))


if __name__ == "__main__":
    main()
