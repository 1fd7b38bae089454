"""Bad input: one line, exit status 2, nothing written, no traceback."""
import os
import sqlite3

import pytest


def assert_one_line_error(result, needle):
    assert result.exit_code == 2, result.output
    # `run` says what it will do and where its plan comes from before any error.
    progress = ("target:", "mpsprobe run:", "loading the op catalogue", "planned from the cached op catalogue")
    lines = [l for l in result.output.splitlines() if l.strip() and not l.startswith(progress)]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and needle in lines[0], lines[0]
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_unknown_op(tmp_path, run_cli):
    db = tmp_path / "x.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "conv2", "--samples", 1)
    assert_one_line_error(result, "unknown op: 'conv2'")
    assert not db.exists()


@pytest.mark.slow
def test_unknown_dtype(tmp_path, run_cli):
    db = tmp_path / "x.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add", "--dtypes", "float33")
    assert_one_line_error(result, "unknown dtype: 'float33'")
    assert not db.exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.slow
def test_unavailable_device(tmp_path, run_cli):
    db = tmp_path / "x.db"
    result = run_cli("run", "--db", db, "--device", "cuda", "--ops", "add")
    assert_one_line_error(result, "device 'cuda' is not available here")
    assert not db.exists()


@pytest.mark.slow
def test_nonsense_device(tmp_path, run_cli):
    result = run_cli("run", "--db", tmp_path / "x.db", "--device", "gpu9", "--ops", "add")
    assert_one_line_error(result, "unknown device: 'gpu9'")


def test_missing_directory(tmp_path, run_cli):
    result = run_cli("run", "--db", tmp_path / "nope" / "x.db", "--device", "cpu", "--ops", "add")
    assert_one_line_error(result, "does not exist")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path, run_cli):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    result = run_cli("run", "--db", locked / "x.db", "--device", "cpu", "--ops", "add")
    assert_one_line_error(result, "not writable")


def test_not_sqlite_is_left_untouched(tmp_path, run_cli):
    db = tmp_path / "notes.db"
    db.write_text("my precious notes\n")
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add")
    assert_one_line_error(result, "is not an SQLite database")
    assert db.read_text() == "my precious notes\n"


def test_someone_elses_database_is_left_untouched(tmp_path, run_cli):
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add")
    assert_one_line_error(result, "not an mpsprobe one")
    assert db.read_bytes() == before


def test_bad_shard_and_samples(tmp_path, run_cli):
    assert_one_line_error(run_cli("run", "--db", tmp_path / "x.db", "--shard", "3/2"), "--shard")
    assert_one_line_error(run_cli("run", "--db", tmp_path / "x.db", "--samples", 0), "--samples")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("option,value,needle", [
    ("--timeout", 0, "--timeout must be a positive"), ("--timeout", -1, "--timeout must be a positive"),
    ("--timeout", "nan", "--timeout must be a positive"), ("--timeout", "inf", "--timeout must be a positive"),
    ("--workers", -1, "--workers must be at least 1"),
])
def test_bad_timeout_and_workers(tmp_path, run_cli, option, value, needle):
    db = tmp_path / "x.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add", option, value)
    assert_one_line_error(result, needle)
    assert not db.exists()


@pytest.mark.slow
def test_a_dtype_filter_that_selects_nothing(tmp_path, run_cli):
    db = tmp_path / "x.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add", "--dtypes", "float8_e4m3fn")
    assert_one_line_error(result, "no (op, dtype) pair to probe")
    assert not db.exists()


def test_resume_with_nothing_to_resume_creates_nothing(tmp_path, run_cli):
    db = tmp_path / "new.db"
    result = run_cli("run", "--db", db, "--device", "cpu", "--ops", "add", "--resume")
    assert_one_line_error(result, "there is no run to resume")
    assert not db.exists()
