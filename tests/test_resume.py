"""Kill the parent mid-sweep, re-run: every case exactly once, nothing lost."""
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # a sweep killed and resumed

OPS = "abs,neg,add,mul,sub,exp,sin,cos,tanh,sigmoid,floor,ceil"
DTYPES = "float32,float64,int32,float16"


def command(db):
    return [sys.executable, "-m", "mpsprobe", "run", "--db", str(db), "--device", "cpu",
            "--ops", OPS, "--dtypes", DTYPES, "--samples", "3", "--no-timing", "--workers", "2",
            "--passes", "forward,backward,inplace,out"]


def test_kill_parent_then_resume_records_every_case_once(tmp_path, results_count, rows):
    db = tmp_path / "resume.db"
    parent = subprocess.Popen(command(db), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 120
    # Every pass of 48 pairs: far more than the first commits, so the kill lands mid-sweep.
    while results_count(db) < 10 and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.02)
    assert parent.poll() is None, "the sweep finished before it could be interrupted"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    recorded = results_count(db)
    assert recorded >= 10
    run = rows(db, "SELECT * FROM runs")
    assert len(run) == 1 and run[0]["state"] == "running"

    resumed = subprocess.run(command(db), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming run" in resumed.stderr

    runs = rows(db, "SELECT * FROM runs")
    assert len(runs) == 1 and runs[0]["state"] == "complete"
    results = rows(db, "SELECT case_id FROM results")
    ids = [r["case_id"] for r in results]
    assert len(ids) == len(set(ids)) > recorded
    # Every pair is done, and the pairs account for every case.
    pairs = rows(db, "SELECT op_id, dtype, n_cases FROM pairs_done")
    assert len(pairs) == len(OPS.split(",")) * len(DTYPES.split(","))
    assert sum(p["n_cases"] for p in pairs) == len(ids)
    for p in pairs:
        mine = [i for i in ids if i.startswith(f"{p['op_id']}|{p['dtype']}|")]
        assert len(mine) == p["n_cases"]
        first = f"{p['op_id']}|{p['dtype']}|0"
        assert first in mine
        if p["dtype"] != "int32":  # floating dtypes have a backward pass of their own
            assert f"{first}|backward" in mine
    assert rows(db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"
