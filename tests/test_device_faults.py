"""A fault costs one case, never another's: the device check, a case's own fds and output, escapes.

Each sweep here runs over the faulty test backend (tests/faulty_backend.py) with
one worker, so its pairs run one after another on the same worker; a clean
sweep of the same ops gives the cases every faulty sweep must still record.
"""
import json
import signal
import sqlite3
from pathlib import Path

import pytest

from mpsprobe.db.query import blame
from mpsprobe.vocabulary import CRASH, ERROR, OK, PASS, TIMEOUT
from processes import gone_soon

pytestmark = pytest.mark.slow   # sweeps through the faulty backend, each case crashing or hanging

FAULTY_BACKEND = Path(__file__).parent / "faulty_backend.py"
OPS = "exp,sin,cos,neg"
ABORT_LINE = "FAULTY: the kernel's assertion failed; aborting"


def _sweep(run_cli, folder, faults, ops=OPS, timeout=20):
    once = folder / "once"
    once.mkdir()
    db = folder / "faulty.db"
    result = run_cli("run", "--db", db, "--backend", FAULTY_BACKEND, "--ops", ops, "--dtypes", "float32",
                     "--samples", 2, "--no-timing", "--workers", 1, "--timeout", timeout,
                     "--passes", "forward", "--json",
                     env={"FAULTY": json.dumps(dict(faults, once_dir=str(once)))})
    return {"db": str(db), "once": once, "result": result}


def _cases(rows, db):
    return {(r["op_id"], r["sample_index"]): r for r in rows(
        db, "SELECT r.*, c.sample_index, c.sample FROM results r JOIN cases c ON c.id = r.case_id")}


def _notes(row):
    return json.loads(row["notes"] or "{}")


@pytest.fixture(scope="module")
def planned(tmp_path_factory, run_cli, rows):
    """The cases a clean sweep of OPS records: what a faulty one must record too."""
    swept = _sweep(run_cli, tmp_path_factory.mktemp("clean"), {})
    assert swept["result"].exit_code == 0, swept["result"].output
    return set(_cases(rows, swept["db"]))


@pytest.fixture(scope="module")
def check_aborts_once(tmp_path_factory, run_cli):
    """exp's first case hangs and is killed; the device check after it aborts once."""
    return _sweep(run_cli, tmp_path_factory.mktemp("abort_once"),
                  {"aten::exp": "hang", "health": "abort"}, timeout=4)


@pytest.fixture(scope="module")
def check_always_aborts(tmp_path_factory, run_cli):
    return _sweep(run_cli, tmp_path_factory.mktemp("abort_always"),
                  {"aten::exp": "hang", "health": "abort_always"}, timeout=4)


@pytest.fixture(scope="module")
def check_hangs(tmp_path_factory, run_cli):
    """The check holds the worker itself (not only its thread): the pool must kill it."""
    return _sweep(run_cli, tmp_path_factory.mktemp("check_hangs"),
                  {"aten::exp": "hang", "health": "hang"}, timeout=3)


@pytest.mark.parametrize("sweep", ["check_aborts_once", "check_always_aborts", "check_hangs"])
def test_a_failed_device_check_loses_no_case_and_blames_no_op(sweep, request, planned, rows):
    swept = request.getfixturevalue(sweep)
    assert swept["result"].exit_code == 0, swept["result"].output
    cases = _cases(rows, swept["db"])
    assert set(cases) == planned      # every planned case, none invented
    assert not [c for c in cases.values() if not c["sample"] or c["sample"].startswith("(")]
    assert cases[("exp", 0)]["status"] == TIMEOUT
    blamed = [k for k, c in cases.items() if c["status"] in (CRASH, TIMEOUT) and k != ("exp", 0)]
    assert not blamed, blamed
    run = rows(swept["db"], "SELECT state FROM runs")[0]
    assert run["state"] == "complete"
    events = rows(swept["db"], "SELECT * FROM run_events")
    assert [e["kind"] for e in events] == ["device_check_failed"], events
    assert "no case lost" not in swept["result"].output or "device event" in swept["result"].output


def test_a_device_check_that_dies_is_one_event_with_its_stderr(check_aborts_once, rows):
    event = rows(check_aborts_once["db"], "SELECT * FROM run_events")[0]
    assert event["how"] == "signal" and event["signal"] == 6
    assert event["stderr_tail"].strip() == ABORT_LINE


def test_a_device_check_that_hangs_is_killed_and_recorded(check_hangs, rows):
    event = rows(check_hangs["db"], "SELECT * FROM run_events")[0]
    assert event["how"] == "hang"


@pytest.mark.parametrize("sweep", ["check_aborts_once", "check_always_aborts", "check_hangs"])
def test_results_after_a_failed_device_check_are_flagged(sweep, request, rows):
    swept = request.getfixturevalue(sweep)
    cases = _cases(rows, swept["db"])
    after = [c for k, c in cases.items() if k != ("exp", 0) and _notes(c).get("after_device_failure")]
    # exp's second case runs on the worker that replaced the failed check's: flagged, like all after it.
    assert cases[("exp", 1)] in after
    summary = json.loads(swept["result"].output[swept["result"].output.index("{"):])
    assert summary["state"] == "complete" and summary["events"][0]["kind"] == "device_check_failed"


def test_a_device_check_that_passes_notes_the_results_after_a_hang(tmp_path, run_cli, rows):
    swept = _sweep(run_cli, tmp_path, {"aten::exp": "hang"}, timeout=4)
    assert swept["result"].exit_code == 0, swept["result"].output
    after = _cases(rows, swept["db"])[("exp", 1)]
    assert after["status"] == PASS and _notes(after)["health_check_ms"] >= 0
    assert "after_device_failure" not in _notes(after)
    assert not rows(swept["db"], "SELECT * FROM run_events")


@pytest.fixture(scope="module")
def case_faults(tmp_path_factory, run_cli):
    """Faults a case does to its worker's channels and output, then a later case's abort."""
    return _sweep(run_cli, tmp_path_factory.mktemp("case_faults"), {
        "aten::exp": ["close_fd2", "abort", "abort"],  # closes fds 1 and 2; the next case aborts, twice
        "aten::cos": ["noise", "abort", "abort"],      # 64 KiB of junk; the next case aborts, twice
        "aten::sin": "setsid",                      # a sleeper in a new session
        "aten::neg": "memory_error",                # bytearray(8 TiB)
    })


def test_an_abort_after_a_case_closed_fd_2_is_a_sigabrt_with_its_message(case_faults, rows):
    cases = _cases(rows, case_faults["db"])
    assert cases[("exp", 0)]["status"] == PASS
    aborted = cases[("exp", 1)]
    assert (aborted["status"], aborted["signal"]) == (CRASH, 6), aborted
    assert aborted["message"] == ABORT_LINE


def test_a_crash_s_stderr_holds_its_own_case_s_output_only(case_faults, rows):
    aborted = _cases(rows, case_faults["db"])[("cos", 1)]
    assert (aborted["status"], aborted["signal"]) == (CRASH, 6)
    assert aborted["stderr_tail"].strip() == ABORT_LINE and aborted["message"] == ABORT_LINE






def test_a_process_started_in_a_new_session_dies_with_its_case_and_is_named(case_faults, rows):
    pid = int((case_faults["once"] / "setsid").read_text())
    assert gone_soon([pid])
    cases = _cases(rows, case_faults["db"])
    named = [c for (op, _), c in cases.items() if op == "sin" and _notes(c).get("killed_after_case")]
    assert named and f"pid {pid}" in named[0]["notes"] and "sleep" in named[0]["notes"]


def test_a_new_session_process_outlives_no_crashed_worker(tmp_path, run_cli):
    swept = _sweep(run_cli, tmp_path, {"aten::sin": "setsid_segfault"}, ops="sin")
    assert swept["result"].exit_code == 0, swept["result"].output
    assert gone_soon([int((swept["once"] / "setsid").read_text())])


def test_a_death_that_does_not_recur_is_the_run_s_event_not_the_case_s_verdict(tmp_path, run_cli, rows):
    # sin's first case kills its worker once (a list fires exactly as listed): run again in
    # another worker it passes, so no crash is charged to it; the death is kept as an event.
    swept = _sweep(run_cli, tmp_path, {"aten::sin": ["segfault"]}, ops="sin")
    assert swept["result"].exit_code == 0, swept["result"].output
    cases = _cases(rows, swept["db"])
    assert {c["status"] for c in cases.values()} == {PASS}, cases
    assert "SIGSEGV" in _notes(cases[("sin", 0)])["crash_not_reproduced"]
    events = rows(swept["db"], "SELECT * FROM run_events")
    assert [(e["kind"], e["before_op"], e["signal"]) for e in events] == [
        ("crash_not_reproduced", "sin", signal.SIGSEGV)]
    assert "ran to pass" in events[0]["detail"]
    assert [r["state"] for r in rows(swept["db"], "SELECT state FROM runs")] == ["complete"]
    # The answer about sin says what it rests on: one of its passes came after a death.
    with sqlite3.connect(swept["db"]) as conn:
        run_id = conn.execute("SELECT id FROM runs").fetchone()[0]
        found = blame.evidence(conn, run_id)
    klass, status, note = blame.verdict(found[("aten::sin", "float32")])
    assert (klass, status) == (OK, PASS) and "1 of its case(s) killed a worker once" in note, note


def test_a_death_that_recurs_is_the_case_s_crash_with_both_deaths_named(tmp_path, run_cli, rows):
    swept = _sweep(run_cli, tmp_path, {"aten::exp": ["segfault", "abort"]}, ops="exp")
    assert swept["result"].exit_code == 0, swept["result"].output
    cases = _cases(rows, swept["db"])
    crashed = cases[("exp", 0)]
    # The first death is the recorded evidence; the second, another kind, is named beside it.
    assert (crashed["status"], crashed["signal"]) == (CRASH, signal.SIGSEGV), crashed
    assert "SIGABRT" in _notes(crashed)["crashed_again"]
    assert cases[("exp", 1)]["status"] == PASS
    assert not rows(swept["db"], "SELECT * FROM run_events")


def test_python_s_memory_error_is_out_of_memory(case_faults, rows):
    failed = [c for (op, _), c in _cases(rows, case_faults["db"]).items() if op == "neg"]
    assert failed and all((c["status"], c["reason_kind"]) == (ERROR, "out_of_memory") for c in failed), failed


def test_a_keyboard_interrupt_after_fd_2_was_closed_says_so(tmp_path, run_cli, rows):
    swept = _sweep(run_cli, tmp_path, {"aten::exp": ["close_fd2", "keyboard", "keyboard"]}, ops="exp")
    stopped = _cases(rows, swept["db"])[("exp", 1)]
    assert stopped["status"] == CRASH and "exiting on KeyboardInterrupt" in stopped["stderr_tail"], stopped
