"""Worker faults beyond a crash: the true cause, leftovers of an op, forged replies, a lost pipe.

The session's faulty sweep (conftest.faulty_sweep) fires, on each of these
ops' first case, one fault of tests/faulty_backend.py. Each must cost at
most its own case, be recorded with the cause the OS reports once the worker
has really gone (an exit status is not a SIGKILL), leave no process behind,
and nothing an op writes into the reply pipe may be taken for a result.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpsprobe.vocabulary import CRASH, PASS
from processes import alive, gone_soon

FAULTY_BACKEND = Path(__file__).parent / "faulty_backend.py"


def _case(rows, db, op, index):
    found = rows(db, "SELECT * FROM results WHERE case_id = ?", [f"{op}|float32|{index}"])
    assert len(found) == 1, (op, index)
    return found[0]


@pytest.mark.parametrize("op, status_text, exception", [
    ("abs", "exited with status 4", "SystemExit"),
    ("exp", "exited with status 1", "KeyboardInterrupt"),
    ("tan", "exited with status 1", "Escape"),    # a BaseException of the op's own
    ("sin", "exited with status 1", "OSError"),   # its reply channel closed under it
])
@pytest.mark.slow
def test_an_exit_is_recorded_as_an_exit_not_a_kill(faulty_sweep, rows, op, status_text, exception):
    hit = _case(rows, faulty_sweep["db"], op, 0)
    assert hit["status"] == CRASH and hit["reason_kind"] == "exit" and hit["signal"] is None
    assert status_text in hit["reason"] and "SIGKILL" not in hit["reason"], hit["reason"]
    assert exception in hit["message"], hit["message"]


@pytest.mark.slow
def test_a_fork_then_segfault_is_a_crash_not_a_timeout(faulty_sweep, rows):
    hit = _case(rows, faulty_sweep["db"], "ceil", 0)
    assert hit["status"] == CRASH and hit["signal"] == int(signal.SIGSEGV), hit


@pytest.mark.slow
def test_a_forged_reply_is_not_taken_for_a_result(faulty_sweep, rows):
    """cos writes result lines claiming a pass into every pipe it can reach, then fails."""
    hit = _case(rows, faulty_sweep["db"], "cos", 0)
    assert hit["status"] != PASS and "after forging" in (hit["message"] or ""), hit


# In a worker of its own: its describe() raises, as an op would mid-case.
RAISING_WORKER = """
import sys
from mpsprobe.engine import worker
class Escape(BaseException):
    pass
def describe(self, request):
    raise {exception}
worker.Worker.describe = describe
worker.main('{{"device": "cpu"}}')
"""


@pytest.mark.slow
def test_a_worker_exits_with_a_status_naming_the_exception():
    expected = {"SystemExit(4)": 4, "KeyboardInterrupt": 1, "Escape('out')": 1}
    request = json.dumps("token") + "\n" + json.dumps({"cmd": "describe"}) + "\n"
    procs = {exception: subprocess.Popen(
        [sys.executable, "-c", RAISING_WORKER.format(exception=exception)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for exception in expected}
    for exception, proc in procs.items():
        out, err = proc.communicate(request, timeout=120)
        assert proc.returncode == expected[exception], err[-2000:]   # an exit, never a signal
        assert f"exiting on {exception.split('(')[0]}" in err, err[-2000:]




@pytest.mark.slow
def test_nothing_an_op_starts_outlives_its_case(faulty_sweep):
    """floor's `sleep 300` and forked child, and the child ceil forked before its worker
    segfaulted (killed with the dead worker's group)."""
    pids = [int(p) for p in (faulty_sweep["once"] / "spawned").read_text().split()]
    pids.append(int((faulty_sweep["once"] / "forked").read_text()))
    assert len(pids) == 3
    assert not [p for p in pids if alive(p)]


# A worker's case: it starts a program and forks a child, then waits between cases.
CASE_THEN_WAIT = """
import os, subprocess, sys, time
from mpsprobe.engine.groups import CaseGroups
groups = CaseGroups()
with groups.case():
    sleeper = subprocess.Popen(["sleep", "300"])
    child = os.fork()
    if child == 0:
        time.sleep(300)
        os._exit(0)
print(sleeper.pid, child, flush=True)
sys.stdin.readline()
"""


def test_what_a_case_starts_is_killed_when_the_case_ends_not_when_the_worker_does():
    worker = subprocess.Popen([sys.executable, "-c", CASE_THEN_WAIT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, process_group=0)
    try:
        pids = [int(p) for p in worker.stdout.readline().split()]
        assert len(pids) == 2
        assert gone_soon(pids, within_s=10)
        assert worker.poll() is None            # the worker itself lives on
    finally:
        try:
            os.killpg(worker.pid, signal.SIGKILL)   # whatever a failure left in its group
        except ProcessLookupError:
            pass
        worker.kill()
        worker.communicate()


@pytest.mark.slow
def test_a_program_an_op_starts_does_not_inherit_the_reply_channel(faulty_sweep):
    """floor starts `sleep 300` with close_fds=False: it holds the worker's stdin and
    stderr, never its reply pipe (which would keep the parent from seeing EOF)."""
    fds = json.loads((faulty_sweep["once"] / "spawned_fds").read_text())
    assert fds["reply_pipes"] and fds["sleeper"]
    assert not set(fds["reply_pipes"]) & set(fds["sleeper"]), fds


@pytest.mark.slow
def test_an_op_that_closes_fd_0_harms_no_case_and_no_worker(faulty_sweep, rows):
    """neg closes fd 0 mid-case: the worker reads its requests from a private copy and
    gives the next case a fresh fd 0, so every case is judged and no worker is lost."""
    statuses = [r["status"] for r in rows(faulty_sweep["db"], "SELECT status FROM results WHERE op_id = 'neg'")]
    assert statuses and set(statuses) == {PASS}, statuses
    # (Other ops of the sweep end their workers on purpose, sin by closing the reply channel.)
    lost = [line for line in faulty_sweep["result"].output.splitlines()
            if "worker" in line and "OSError" in line and "neg" in line]
    assert not lost, lost


@pytest.mark.slow
def test_a_worker_gone_before_its_next_request_costs_nothing_and_says_so(tmp_path, rows):
    """Killed while idle: the next request meets a broken pipe; the pair is run by another."""
    from mpsprobe.engine.pool import Pool
    said, cases, pairs = [], [], []
    pool = Pool({"device": "cpu", "samples": 1, "timing": False}, size=1, say=said.append)
    with pool:
        pool.request({"cmd": "describe"})
        worker = pool.workers[0]
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
        pool.run([{"op": "abs", "dtype": "float32"}],
                 lambda pair, index, sample, result: cases.append((index, result["status"])),
                 lambda pair, n: pairs.append(n))
    assert cases == [(0, PASS)] and pairs == [1]
    assert said and "SIGKILL" in said[0] and "no case lost" in said[0]


@pytest.mark.slow
def test_a_parent_held_up_past_the_timeout_does_not_time_out_a_worker_that_replied(tmp_path):
    """exp's first case waits for a file; once its "begin" is read, the parent is held
    up (as by another process's database lock) past the case timeout, and the file
    is made at once: the worker replies in time, and its reply is read, not its case
    timed out."""
    from mpsprobe.engine.pool import Pool, select_one
    env = dict(os.environ, FAULTY=json.dumps({"aten::exp": "wait", "once_dir": str(tmp_path)}))
    pool = Pool({"device": "cpu", "backend": str(FAULTY_BACKEND), "samples": 2, "timing": False,
                 "passes": ["forward"], "catalogue": True}, size=2, timeout=4.0, env=env)
    pairs = [{"op": op, "dtype": "float32"} for op in
             ("exp", "add", "mul", "sub", "maximum", "minimum", "atan2", "fmod", "hypot")]
    statuses, stalls = [], []

    def on_case(pair, index, sample, result):
        statuses.append(result["status"])
        waiting = [w for w in pool.workers if w.task and w.task["op"] == "exp" and w.index is not None]
        if not stalls and waiting:
            stalls.append(pair["op"])
            (tmp_path / "go").touch()
            time.sleep(3 * pool.timeout)
    with pool:
        pool.start()
        for worker in pool.workers:   # both ready (torch and the catalogue loaded) before any pair
            worker.send({"cmd": "plan", "ops": ["exp"], "dtypes": ["float32"]})
            replies = []
            while not replies and select_one(worker.proc.stdout, 180):
                replies = list(worker.messages(os.read(worker.proc.stdout.fileno(), 1 << 16)))
        pool.run(pairs, on_case, lambda pair, n: None)
    assert stalls, "exp's case was never seen waiting"
    assert statuses and set(statuses) == {PASS}, statuses


@pytest.mark.slow
def test_a_hung_case_is_timed_out_even_when_its_next_pair_is_larger_than_a_pipe(tmp_path):
    """exp's case hangs. The next pair's request is larger than a pipe holds (a model's
    calls with their index tensors, a long list of cases done): the parent must not
    block writing it to the hung worker, or nothing would ever time the case out."""
    from mpsprobe.engine.pool import Pool
    from mpsprobe.vocabulary import TIMEOUT
    env = dict(os.environ, FAULTY=json.dumps({"aten::exp": "wait", "once_dir": str(tmp_path)}))
    pool = Pool({"device": "cpu", "backend": str(FAULTY_BACKEND), "samples": 1, "timing": False,
                 "passes": ["forward"]}, size=1, timeout=3.0, env=env)
    unrelated_keys = [f"{i}|no such pass" for i in range(20000)]   # ~400 KB of request
    pairs = [{"op": "exp", "dtype": "float32"}, {"op": "abs", "dtype": "float32", "done": unrelated_keys}]
    cases = {}
    started = time.monotonic()
    try:
        with pool:
            pool.run(pairs, lambda pair, index, sample, result: cases.update({pair["op"]: result["status"]}),
                     lambda pair, n: None)
    finally:
        (tmp_path / "go").touch()
    assert cases == {"exp": TIMEOUT, "abs": PASS}
    assert time.monotonic() - started < 100   # the hang held 120 s unless timed out
