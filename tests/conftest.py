"""Shared fixtures: runs of the real probe over tiny op subsets, made once per session."""
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from mpsprobe.cli import cli

TESTS = Path(__file__).parent
FAKE_MPS = str(TESTS / "fake_mps.py")

# One op for each way the fake MPS backend fails, plus ops that work.
FAKE_OPS = "histc,linalg.svd,exp,erfinv,lgamma,add,empty_like"
FAKE_DTYPES = "float16,float32,float64,int32"


def run_cli(*args, env=None):
    """Invoke `mpsprobe` in-process; returns click's Result."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def rows(db_path, sql, params=()):
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


@pytest.fixture(scope="session")
def fake_mps_db(tmp_path_factory):
    """A run over the fake MPS backend: every status, via the real pipeline."""
    path = tmp_path_factory.mktemp("fake") / "fake.db"
    result = run_cli("run", "--db", path, "--backend", FAKE_MPS, "--ops", FAKE_OPS,
                     "--dtypes", FAKE_DTYPES, "--samples", 2, "--timeout", 3,
                     "--workers", 2, "--json")
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.fixture(scope="session")
def cpu_db(tmp_path_factory):
    """A run on the CPU target over a few well-behaved ops, with timing."""
    path = tmp_path_factory.mktemp("cpu") / "cpu.db"
    result = run_cli("run", "--db", path, "--device", "cpu",
                     "--ops", "add,mul,nn.functional.conv2d,sum,empty_like,argmax",
                     "--dtypes", "float32,float16,int64", "--samples", 2, "--json")
    assert result.exit_code == 0, result.output
    return str(path)


def results_count(db_path):
    """Rows in results, or 0 while the database is not created yet (a sweep starting)."""
    try:
        conn = sqlite3.connect(db_path, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM results").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def summary(result):
    """The --json summary printed at the end of `mpsprobe run`."""
    text = result.stdout if hasattr(result, "stdout") else result.output
    return json.loads(text[text.index("{"):])
