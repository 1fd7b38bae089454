"""The cached catalogue: `ops`, a refused name and a complete run's re-run answer
without PyTorch's OpInfo database, from a cache kept per torch build."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from mpsprobe.engine import described
from mpsprobe.ops import catalogue

OPINFO_MODULE = "torch.testing._internal.common_methods_invocations"

# Runs the CLI in a fresh interpreter, then says which heavy modules it imported.
_PROBE = """
import sys
from mpsprobe.cli import cli
try:
    cli(sys.argv[1:], prog_name="mpsprobe")
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write("\\nLOADED " + repr(sorted(m for m in ("torch", %r, "sqlite_utils") if m in sys.modules)) + "\\n")
sys.exit(code)
""" % OPINFO_MODULE


def _cli(cache, *args):
    env = dict(os.environ, MPSPROBE_CACHE=str(cache))
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True,
                         text=True, env=env, timeout=600)
    loaded = out.stderr.rsplit("LOADED ", 1)[-1].strip()
    return out, loaded, time.monotonic() - started


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache made by one `ops` call (the only one here that reads OpInfo)."""
    cache = tmp_path_factory.mktemp("cache")
    out, loaded, _ = _cli(cache, "ops", "add")
    assert out.returncode == 0, out.stderr
    assert OPINFO_MODULE in loaded and "loading the op catalogue" in out.stderr
    return cache


def test_ops_answers_from_the_cache_without_opinfo_or_torch(warm_cache):
    out, loaded, seconds = _cli(warm_cache, "ops", "conv")
    assert out.returncode == 0, out.stderr
    assert loaded == "[]"      # neither OpInfo nor torch itself
    assert "nn.functional.conv2d" in out.stdout and out.stdout.rstrip().endswith("7 ops")  # torchvision.deform_conv2d too
    assert "loading" not in out.stderr


def test_a_refused_name_answers_from_the_cache_without_opinfo(warm_cache, tmp_path):
    out, loaded, _ = _cli(warm_cache, "run", "--db", tmp_path / "x.db", "--device", "cpu",
                          "--ops", "conv2d")
    assert out.returncode == 2
    assert "unknown op: 'conv2d' (did you mean nn.functional.conv2d" in out.stderr
    assert loaded == "[]"   # neither OpInfo, nor torch, nor the store: refused before the sweep's imports
    assert not (tmp_path / "x.db").exists()
    out, loaded, _ = _cli(warm_cache, "run", "--db", tmp_path / "x.db", "--device", "cpu",
                          "--ops", "add", "--dtypes", "float128")
    assert out.returncode == 2 and "unknown dtype: 'float128'" in out.stderr and loaded == "[]"


def test_a_complete_run_re_run_answers_without_opinfo(warm_cache, tmp_path):
    args = ("run", "--db", tmp_path / "x.db", "--device", "cpu", "--ops", "add", "--dtypes",
            "float32", "--samples", 1, "--workers", 1, "--no-timing", "--passes", "forward")
    out, _, _ = _cli(warm_cache, *args)
    assert out.returncode == 0, out.stderr
    again, loaded, _ = _cli(warm_cache, *args)
    assert again.returncode == 0, again.stderr
    assert "1 of 1 (op, dtype) pairs already done" in again.stderr
    # The first run kept the device's description: no worker (torch) is needed to answer.
    assert "already complete in the database" in again.stderr and "starting the workers" not in again.stderr
    assert "torch" not in loaded and OPINFO_MODULE not in loaded


@pytest.mark.slow
def test_a_kept_description_of_another_device_answers_nothing(warm_cache, tmp_path):
    """A kept description that no longer matches the device (here: made to name another)
    cannot make a run complete: the workers describe the device, and the run is found as before."""
    cache = tmp_path / "cache"
    shutil.copytree(warm_cache, cache)
    args = ("run", "--db", tmp_path / "x.db", "--device", "cpu", "--ops", "add", "--dtypes",
            "float32", "--samples", 1, "--workers", 1, "--no-timing", "--passes", "forward")
    assert _cli(cache, *args)[0].returncode == 0
    kept = list((cache / "described").iterdir())
    assert kept
    for path in kept:
        data = json.loads(path.read_text())
        data["env"]["device_name"] = "another CPU"
        path.write_text(json.dumps(data))
    again, _, _ = _cli(cache, *args)
    assert again.returncode == 0, again.stderr
    assert "already complete in the database" not in again.stderr
    assert "starting the workers" in again.stderr and "1 of 1 (op, dtype) pairs already done" in again.stderr


def test_a_description_is_kept_per_device_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path))
    build = {"version": "2.13.0", "git": "abc"}
    key = described.key(build, "cpu", None, False, {"HOME": "/x"})
    described.save(key, {"device": "cpu", "device_name": "CPU"})
    assert described.load(key) == {"device": "cpu", "device_name": "CPU"}
    assert described.key(build, "cpu", None, False, {"HOME": "/y"}) == key   # not a device setting
    for other in (described.key(build, "cuda", None, False, {}),
                  described.key(build, "cpu", None, True, {}),
                  described.key(build, "cpu", None, False, {"CUDA_VISIBLE_DEVICES": "1"}),
                  described.key({"version": "2.13.0", "git": "abd"}, "cpu", None, False, {})):
        assert other != key and described.load(other) is None
    assert described.key(None, "cpu", None, False, {}) is None   # no torch build: nothing kept
    monkeypatch.setattr(described, "_boot", lambda: None)        # a boot that cannot be told
    assert described.key(build, "cpu", None, False, {}) is None


def test_the_cache_is_kept_per_torch_build_and_catalogue_code(tmp_path, monkeypatch):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path))
    build = {"version": "2.13.0+cpu", "git": "abc123"}
    data = {"torch_version": "2.13.0+cpu", "torch_git": "abc123", "dtype_names": {}, "ops": []}
    catalogue.save(build, data)
    assert catalogue.load(build) == data
    assert catalogue.load({"version": "2.13.0+cpu", "git": "def456"}) is None   # another build
    assert catalogue.load({"version": "2.12.0", "git": "abc123"}) is None
    catalogue.save({"version": "2.12.0", "git": "x"}, data)   # data of another build: not kept
    assert catalogue.load({"version": "2.12.0", "git": "x"}) is None
    monkeypatch.setattr(catalogue, "_code_fingerprint", lambda: "changed")   # new catalogue code
    assert catalogue.load(build) is None


def test_a_damaged_cache_file_is_rebuilt_not_believed(tmp_path, monkeypatch):
    monkeypatch.setenv("MPSPROBE_CACHE", str(tmp_path))
    build = {"version": "2.13.0", "git": "abc"}
    os.makedirs(os.path.dirname(catalogue.cache_path(build)))
    with open(catalogue.cache_path(build), "w") as f:
        f.write('{"torch_version": "2.13.0", "torch_git": "abc", "ops": [')   # cut short
    assert catalogue.load(build) is None


def test_the_torch_build_is_read_without_importing_torch(tmp_path):
    script = ("import sys, json; from mpsprobe.ops import catalogue; b = catalogue.torch_build(); "
              "print(json.dumps([b, 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    build, imported = json.loads(out.stdout)
    import torch
    assert not imported
    assert build == {"version": torch.__version__, "git": torch.version.git_version}
    # Another interpreter's torch is asked of that interpreter.
    assert catalogue.torch_build(sys.executable + "-no-such") is None


def test_pairs_carry_the_passes_each_op_has():
    data = {"dtype_names": {"float32": "float32", "float": "float32", "int64": "int64"},
            "ops": [{"op": "abs", "name": "abs", "variant": "", "aten_name": "abs",
                     "dtypes": ["float32", "int64"],
                     "passes": {"float32": ["forward", "backward", "inplace", "out"],
                                "int64": ["forward", "inplace", "out"]}}]}
    found = catalogue.pairs(data, ["abs"], ["float", "int64"], passes=("forward", "backward"))
    assert [(p["dtype"], p["passes"]) for p in found] == [("float32", ["forward", "backward"]),
                                                           ("int64", ["forward"])]
    assert [catalogue.planned_cases(p, 3) for p in found] == [6, 3]
    with pytest.raises(catalogue.CatalogueError, match="unknown op: 'ab' .*did you mean abs"):
        catalogue.pairs(data, ["ab"])


@pytest.mark.slow
def test_a_run_that_changed_after_it_was_found_complete_runs_nothing_under_the_kept_description(
        warm_cache, tmp_path, monkeypatch):
    """Found complete with the kept description, then changed before it was claimed (a pair
    no longer done): its cases would run on the device described anew, and a device that
    is not the run's is refused rather than recorded under the run."""
    import sqlite3
    from mpsprobe.engine.plan import SweepOptions
    from mpsprobe.engine.sweep import Sweep, SweepError
    cache, db = tmp_path / "cache", tmp_path / "x.db"
    shutil.copytree(warm_cache, cache)
    assert _cli(cache, "run", "--db", db, "--device", "cpu", "--ops", "add", "--dtypes", "float32",
                "--samples", 1, "--workers", 1, "--no-timing", "--passes", "forward")[0].returncode == 0
    monkeypatch.setenv("MPSPROBE_CACHE", str(cache))
    sweep = Sweep(SweepOptions(db_path=str(db), device="cpu", ops=["add"], dtypes=["float32"], samples=1,
                               timing=False, workers=1, passes=("forward",)))
    sweep.prepare()
    assert sweep.described_from_cache and not sweep.pool.workers
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM pairs_done")
    asked = []

    def describe(message, budget=None):
        asked.append(message["cmd"])
        return {"env": dict(sweep.env, device_name="another CPU")}
    monkeypatch.setattr(sweep.pool, "request", describe)
    with pytest.raises(SweepError, match="no longer the one this run was recorded on"):
        sweep.open()
    assert asked == ["describe"]
