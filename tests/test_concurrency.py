"""Two `mpsprobe run` processes on one database at the same time.

The decision: runs with different options (different run keys) record side
by side, each complete, nothing lost or duplicated; SQLite's WAL and busy
timeout serialise their commits. A second process with the SAME options
would resume the very run the first is still recording, so it refuses, with
one line naming the process that holds the run; re-run once that finishes.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two sweeps at once, twice

FAULTY = str(Path(__file__).parent / "faulty_backend.py")

OPS_A = "abs,neg,add,mul,sub,exp"
OPS_B = "exp,sin,cos,floor,ceil,add"   # overlaps A: both write the same ops and cases rows
DTYPES = "float32,int32"


def command(db, ops):
    return [sys.executable, "-m", "mpsprobe", "run", "--db", str(db), "--device", "cpu",
            "--ops", ops, "--dtypes", DTYPES, "--samples", "3", "--no-timing", "--workers", "1",
            "--passes", "forward"]


@pytest.fixture(scope="session")
def assert_run_complete_and_exact(rows):
    def assert_run_complete_and_exact(db, run):
        assert run["state"] == "complete"
        ids = [r["case_id"] for r in rows(db, "SELECT case_id FROM results WHERE run_id = ?", [run["id"]])]
        assert len(ids) == len(set(ids)) == run["cases_total"]
        pairs = rows(db, "SELECT op_id, dtype, n_cases FROM pairs_done WHERE run_id = ?", [run["id"]])
        assert set(ids) == {f"{p['op_id']}|{p['dtype']}|{i}" for p in pairs for i in range(p["n_cases"])}
        return pairs
    return assert_run_complete_and_exact


def test_different_runs_at_once_both_finish_with_nothing_lost(tmp_path, assert_run_complete_and_exact, rows):
    db = tmp_path / "shared.db"
    procs = [subprocess.Popen(command(db, ops), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for ops in (OPS_A, OPS_B)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-2000:]
    runs = rows(db, "SELECT * FROM runs")
    assert len(runs) == 2
    for run in runs:
        pairs = assert_run_complete_and_exact(db, run)
        ops = OPS_A if '"abs"' in run["options"] else OPS_B
        assert {p["op_id"] for p in pairs} == set(ops.split(","))
    assert rows(db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"


def test_same_run_twice_at_once_the_second_refuses_clearly(tmp_path, assert_run_complete_and_exact, rows):
    # The first sweep is held on its first exp case (a test backend waits for
    # a "go" file), so the second surely starts while the first is recording.
    db, hold = tmp_path / "same.db", tmp_path / "hold"
    hold.mkdir()
    env = dict(os.environ, FAULTY=json.dumps({"aten::exp": "wait", "once_dir": str(hold)}))
    same = command(db, OPS_A) + ["--backend", FAULTY]
    first = subprocess.Popen(same, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (hold / "aten__exp").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None and (hold / "aten__exp").exists(), "the first sweep never got going"
        second = subprocess.run(same, capture_output=True, text=True, timeout=300, env=env)
    finally:
        (hold / "go").touch()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]

    assert second.returncode == 2, second.stderr[-2000:]
    errors = [l for l in second.stderr.splitlines() if l.startswith("Error: ")]
    assert len(errors) == 1 and f"process {first.pid}" in errors[0], second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    runs = rows(db, "SELECT * FROM runs")
    assert len(runs) == 1 and runs[0]["pid"] == first.pid   # the refusal wrote nothing
    assert_run_complete_and_exact(db, runs[0])

    # Once the first has finished, the same command is welcome again (and has nothing to do).
    again = subprocess.run(same, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["cases_total"] for r in rows(db, "SELECT * FROM runs")] == [runs[0]["cases_total"]]
