"""The Mac-only code paths, through their seams (no Mac here): what a Mac says, read right."""
import json
import os
import shutil
import sqlite3
import time

import pytest
import torch

from mpsprobe.engine import environment, pool, sweep
from mpsprobe.engine.devices import Target

PROFILER = json.dumps({"SPDisplaysDataType": [{
    "_name": "Apple M2 Max", "sppci_bus": "spdisplays_builtin", "sppci_cores": "38",
    "sppci_device_type": "spdisplays_gpu", "sppci_model": "Apple M2 Max", "spdisplays_mtlgpufamilysupport":
    "spdisplays_metal3"}]})


def test_the_mps_device_is_named_by_chip_and_gpu_cores():
    assert environment.mac_gpu(PROFILER) == ("Apple M2 Max", 38)
    assert environment.mac_gpu_name(PROFILER) == "Apple M2 Max (38-core GPU)"


def test_without_system_profiler_the_cpu_brand_names_it(monkeypatch):
    monkeypatch.setattr(environment, "_command", lambda *a: "Apple M1" if "machdep.cpu.brand_string" in a else None)
    assert environment.mac_gpu_name() == "Apple M1"
    monkeypatch.setattr(environment, "_command", lambda *a: None)
    assert environment.mac_gpu_name() == "Apple MPS"


def test_an_mps_target_asks_the_machine_for_its_name(monkeypatch):
    monkeypatch.setattr(environment, "_command",
                        lambda *a: PROFILER if a[0] == "system_profiler" else None)
    assert Target("mps").device_name == "Apple M2 Max (38-core GPU)"


@pytest.mark.parametrize("hv, environ, expected", [
    ("1", {}, 1), ("0", {}, 0), (None, {}, None),
    ("0", {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "github-hosted"}, 1),
    (None, {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "github-hosted"}, 1),
    ("0", {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "self-hosted"}, 0),
])
def test_virtualisation_from_the_sysctl_and_github_hosted_runners(hv, environ, expected):
    assert environment.mac_virtualized(hv, environ) == expected


def test_rosetta_is_read_from_the_sysctl(monkeypatch):
    monkeypatch.setattr(environment.sys, "platform", "darwin")
    monkeypatch.setattr(environment, "_command", lambda *a: "1" if "sysctl.proc_translated" in a else None)
    assert environment._translated() == 1
    monkeypatch.setattr(environment, "_command", lambda *a: None)  # Intel Macs have no such sysctl
    assert environment._translated() == 0


def test_every_mps_setting_is_recorded():
    environ = {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0", "PYTORCH_MPS_FAST_MATH": "1",
               "PYTORCH_MPS_PREFER_METAL": "1", "PYTORCH_ENABLE_MPS_FALLBACK": "1", "PATH": "/bin"}
    assert environment.device_env(environ) == {k: v for k, v in environ.items() if k != "PATH"}


def test_mps_memory_and_cache_go_through_torch_mps(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 1000)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 5000)
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("empty"))
    target = Target("mps")
    assert target.memory() == {"current_allocated": 1000, "driver_allocated": 5000, "peak_allocated": 1000}
    target.empty_cache()
    assert calls == ["empty"]
    assert Target("cpu").memory() == {}


def test_health_check_times_a_tiny_op_or_gives_up():
    assert Target("cpu").health_check(5.0) >= 0

    class Busy(Target):
        def synchronize(self):
            time.sleep(5)
    started = time.monotonic()
    assert Busy("cpu").health_check(0.2) is None
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("device, expected", [("mps", 1), ("mps:0", 1), ("cuda", 4), ("cuda:1", 4), ("cpu", 8), ("fake-mps", 8)])
def test_default_workers_by_device(device, expected):
    assert sweep.default_workers(device, 8) == expected


def test_a_named_cuda_target_starts_a_pool_of_a_few_workers_with_the_cores_shared(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    s = sweep.Sweep(sweep.SweepOptions(db_path=str(tmp_path / "x.db"), device="cuda"))
    assert s.pool.size == sweep.CUDA_WORKERS == 4 and s.config["threads"] == 4
    assert sweep.Sweep(sweep.SweepOptions(db_path=str(tmp_path / "x.db"), device="cpu")).pool.size == 16


def test_the_pool_shrinks_to_one_worker_once_the_device_is_mps(tmp_path):
    s = sweep.Sweep(sweep.SweepOptions(db_path=str(tmp_path / "x.db")))
    s.env = {"device": "mps"}
    s._fit_pool_to_device()
    assert s.pool.size == 1 and s.config["threads"] == (os.cpu_count() or 1)
    many = sweep.Sweep(sweep.SweepOptions(db_path=str(tmp_path / "x.db"), workers=3))
    many.env = {"device": "mps"}
    many._fit_pool_to_device()
    assert many.pool.size == 3  # more are allowed


def test_a_live_pid_is_known_without_proc(monkeypatch):
    run = {"state": "running", "pid": 4242, "hostname": "mac"}
    monkeypatch.setattr(sweep.os.path, "isdir", lambda p: False)  # macOS: no /proc
    monkeypatch.setattr(sweep, "_command_line", lambda pid: "python -m mpsprobe run")

    def kill(pid, signal, error=None):
        if error:
            raise error
    for error, alive in ((None, True), (PermissionError(), True), (ProcessLookupError(), False)):
        monkeypatch.setattr(sweep.os, "kill", lambda pid, sig, e=error: kill(pid, sig, e))
        assert sweep._recording_now(run, {"hostname": "mac"}) is alive


@pytest.mark.parametrize("command, recording", [
    ("/Users/me/.venv/bin/python /Users/me/.venv/bin/mpsprobe run --ops add", True),
    ("/opt/homebrew/bin/python3.12 -m ipykernel_launcher -f kernel-1.json", True),  # mpsprobe.probe() in a notebook
    ("/Applications/Safari.app/Contents/MacOS/Safari", False),                      # the pid, reused
    ("", False),                                                                     # gone between kill and ps
    (None, True),                                                                    # cannot tell: assume it is
])
def test_a_live_pid_is_a_recorder_only_if_it_could_be_one(monkeypatch, command, recording):
    run = {"state": "running", "pid": 4242, "hostname": "mac"}
    monkeypatch.setattr(sweep.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(sweep, "_command_line", lambda pid: command)
    assert sweep._recording_now(run, {"hostname": "mac"}) is recording


def test_the_command_line_comes_from_ps_without_proc(monkeypatch):
    import subprocess
    monkeypatch.setattr(sweep.os.path, "isdir", lambda p: False)
    calls = []

    def ps(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="python -m mpsprobe run\n", stderr="")
    monkeypatch.setattr(subprocess, "run", ps)
    assert sweep._command_line(4242) == "python -m mpsprobe run"
    assert calls == [["ps", "-o", "command=", "-p", "4242"]]
    # Where /proc exists, it answers: this very process.
    monkeypatch.undo()
    assert "python" in sweep._command_line(os.getpid()).lower()


def test_after_a_killed_hang_the_next_pair_checks_the_device_once():
    sent = []

    class Worker:
        hangs_seen = 0

        def send(self, message):
            sent.append(message)
    p = pool.Pool({"device": "cpu"})
    p.hangs = 1
    worker = Worker()
    for _ in range(2):
        p._assign(worker, {"op": "add", "dtype": "float32", "done": []})
    assert [m.get("health_check") for m in sent] == [True, None]


def test_a_crash_keeps_the_cause_its_stderr_names():
    lines = ["/Users/me/x.py:3: UserWarning: something",
             "libc++abi: terminating due to uncaught exception of type c10::NotImplementedError: The operator "
             "'aten::_linalg_eigh.eigenvalues' is not currently implemented for the MPS device.",
             "zsh: abort      python x.py"]
    found = pool._evidence(lines)
    assert found["reason_kind"] == "no_kernel" and found["aten_op"] == "aten::_linalg_eigh.eigenvalues"
    assert found["message"].startswith("libc++abi")
    assert pool._evidence(["Traceback (most recent call last):", "KeyboardInterrupt"]) == {}


def test_a_crash_in_mpsgraph_s_compiler_keeps_the_diagnostic_as_its_message():
    # pytorch/pytorch#78879: what a worker prints before it aborts.
    diagnostic = ('loc("mps_multiply"("(mpsFileLoc): /AppleInternal/Library/BuildRoots/b6051351-c030-11ec-96e9-'
                  '3e7866fcf3a1/Library/Caches/com.apple.xbs/Sources/MetalPerformanceShadersGraph/mpsgraph/'
                  'MetalPerformanceShadersGraph/Core/Files/MPSGraphUtilities.mm":219:0)): error: input types '
                  "'tensor<5xf32>' and 'tensor<5xi1>' are not broadcast compatible")
    found = pool._evidence([diagnostic, "LLVM ERROR: Failed to infer result type(s)."])
    assert found == {"reason_kind": "signal",
                     "message": diagnostic + " LLVM ERROR: Failed to infer result type(s)."}


def _two_runs(cpu_db, path, suffix):
    """A copy of the CPU run's database with that run twice, the copy's id ending in
    `suffix`, results and all: (connection, the first run's id)."""
    shutil.copy(cpu_db, path)
    conn = sqlite3.connect(path)
    first = conn.execute("SELECT id FROM runs").fetchone()[0]
    columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    conn.execute(f"INSERT INTO runs SELECT {', '.join('id || ' + repr(suffix) if c == 'id' else c for c in columns)}"
                 " FROM runs")
    result_columns = [r[1] for r in conn.execute("PRAGMA table_info(results)")]
    conn.execute(f"INSERT INTO results ({', '.join(result_columns)}) SELECT "
                 + ", ".join(f"run_id || {suffix!r}" if c == "run_id" else c for c in result_columns)
                 + " FROM results WHERE run_id = ?", [first])
    return conn, first


def test_virtual_machine_runs_are_kept_apart_from_bare_metal(tmp_path, cpu_db):
    from mpsprobe.db.query import history, runs
    from mpsprobe.vocabulary import CRASH
    conn, bare = _two_runs(cpu_db, tmp_path / "vm.db", "-vm")
    conn.execute("UPDATE runs SET os_name = 'macOS', virtualized = 0")  # the same Mac, bare and in a VM
    conn.execute("UPDATE runs SET virtualized = 1, started = '9999' WHERE id = ?", [bare + "-vm"])
    conn.execute("UPDATE results SET status = ? WHERE run_id = ?", [CRASH, bare + "-vm"])
    conn.commit()

    # The newer run is the VM's, yet the default answer is bare metal's, and a VM says what it is.
    assert runs.pick_run(conn)["id"] == bare
    vm = runs.pick_run(conn, run_id=bare + "-vm")
    assert runs.machine_kind(vm) == runs.VIRTUAL_MACHINE and "(virtual machine)" in runs.describe(vm)
    # "Works since" is told per machine: the VM's crashes do not make bare metal's add fail.
    firsts = {(r["machine_kind"], r["dtype"]): r["latest_status"] for r in history.firsts(conn, "add")}
    assert firsts[(runs.BARE_METAL, "float32")] != CRASH and firsts[(runs.VIRTUAL_MACHINE, "float32")] == CRASH
    devices = {n["device"] for n in history.notes(conn, "add")}
    assert devices == {"cpu", "cpu · virtual machine"}  # the grid's group words
    # A Linux VM's passed-through GPU is the hardware itself: not a virtual machine's result.
    assert runs.machine_kind({"virtualized": 1, "os_name": "Ubuntu"}) == runs.BARE_METAL
    conn.close()


def test_a_virtual_machine_s_messages_are_told_apart_on_the_op_page(tmp_path, cpu_db):
    import asyncio
    from mpsprobe.db.query import op
    from mpsprobe.site import make_datasette
    conn, bare = _two_runs(cpu_db, tmp_path / "vm.db", "-vm")
    conn.execute("UPDATE runs SET os_name = 'macOS', virtualized = 0, device = 'mps'")
    conn.execute("UPDATE runs SET virtualized = 1 WHERE id = ?", [bare + "-vm"])
    conn.execute("UPDATE results SET status = 'error', message = 'MPS backend out of memory (MPS allocated: 1.00 GB, "
                 "other allocations: 0 bytes, max allowed: 1.00 GB).' WHERE op_id = 'add'")
    conn.commit()
    said = {(m["device"], m["machine_kind"]) for m in op.messages(conn, "add")}
    conn.close()
    assert said == {("mps", "bare metal"), ("mps", "virtual machine")}   # one message, told per machine

    async def page():
        return await make_datasette(str(tmp_path / "vm.db")).client.get("/-/op/add")
    text = asyncio.run(page()).text
    assert "run on mps · virtual machine</td>" in text and "run on mps</td>" in text


def test_canned_queries_across_runs_say_which_rows_a_virtual_machine_measured(tmp_path, cpu_db):
    from mpsprobe.site.plugins.mpsprobe_site import CANNED_QUERIES
    conn, bare = _two_runs(cpu_db, tmp_path / "vm.db", "-vm")
    conn.execute("UPDATE runs SET os_name = 'macOS', virtualized = 0")
    conn.execute("UPDATE runs SET virtualized = 1 WHERE id = ?", [bare + "-vm"])
    conn.execute("UPDATE results SET status = 'unsupported' WHERE op_id = 'add'")
    conn.commit()
    conn.row_factory = sqlite3.Row
    firsts = conn.execute(CANNED_QUERIES["first_pass_version"]["sql"], {"op_id": "add"}).fetchall()
    refused = conn.execute(CANNED_QUERIES["unsupported_for_dtype"]["sql"], {"dtype": ""}).fetchall()
    conn.close()
    assert {r["machine_kind"] for r in firsts} == {"bare metal", "virtual machine"}
    assert {(r["run_id"], r["machine_kind"]) for r in refused} == {(bare, "bare metal"),
                                                                   (bare + "-vm", "virtual machine")}


def test_an_os_split_names_only_the_os_versions_measured(cpu_db, tmp_path):
    from mpsprobe.db.query import history
    from mpsprobe.vocabulary import UNSUPPORTED
    conn, old = _two_runs(cpu_db, tmp_path / "split.db", "-15")
    conn.execute("UPDATE runs SET os_name = 'macOS', os_version = '13.6', virtualized = 0")
    conn.execute("UPDATE runs SET os_version = '15.1' WHERE id = ?", [old + "-15"])
    conn.execute("UPDATE results SET status = ? WHERE run_id = ? AND op_id = 'add'", [UNSUPPORTED, old])
    conn.commit()
    texts = [n["text"] for n in history.notes(conn, "add")]
    conn.close()
    # macOS 14 was never measured: the note must not say "< 15".
    assert texts and all("unsupported on macOS 13, works on macOS 15" in t and "<" not in t for t in texts)


def test_cuda_memory_is_read_in_one_call_of_the_allocator_s_counters(monkeypatch):
    calls = []
    nested = {"allocated_bytes": {"all": {"current": 1000, "peak": 4000}, "large_pool": {"current": 7}},
              "reserved_bytes": {"all": {"current": 8000, "peak": 9000}}}

    def stats(device):
        calls.append(device)
        return nested
    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", stats)
    target = Target.__new__(Target)   # no CUDA here: only the device's type matters to memory()
    target.torch_device = torch.device("cuda", 0)
    assert target.memory() == {"current_allocated": 1000, "driver_allocated": 8000, "peak_allocated": 4000}
    assert len(calls) == 1
