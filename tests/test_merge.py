"""`mpsprobe merge`: a union keyed by stable ids; idempotent; refuses what it cannot read."""
import json
import shutil
import sqlite3

import pytest

from mpsprobe.db import merge as merge_module, schema
from mpsprobe.versions import version_key


COUNTED = ("runs", "ops", "cases", "results", "pairs_done")


@pytest.fixture(scope="session")
def _counts(rows):
    def _counts(db):
        return {t: rows(db, f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in COUNTED}
    return _counts


@pytest.fixture(scope="session")
def _dump(rows):
    def _dump(db):
        return {t: rows(db, f"SELECT * FROM {t} ORDER BY 1, 2") for t in COUNTED}
    return _dump


def _as_other_torch(source, path, torch_version):
    """A copy of `source` as if another machine had run it on another torch."""
    shutil.copy(source, path)
    conn = sqlite3.connect(path)
    (old_id,) = conn.execute("SELECT id FROM runs").fetchone()
    new_id = f"{old_id[:24]}{'other':0>8}"
    with conn:
        conn.execute("UPDATE runs SET id = ?, torch_version = ?, torch_version_key = ? "
                     "WHERE id = ?", [new_id, torch_version, version_key(torch_version), old_id])
        for table in ("results", "pairs_done"):
            conn.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", [new_id, old_id])
        # That torch fixed exp in float16 (the fake backend's wrong numbers).
        conn.execute("UPDATE results SET status = 'pass' WHERE op_id = 'exp' AND dtype = 'float16'")
    conn.close()
    return str(path)


@pytest.mark.slow
def test_merge_is_idempotent(fake_mps_db, tmp_path, _dump, run_cli):
    out = str(tmp_path / "all.db")
    first = run_cli("merge", fake_mps_db, "-o", out, "--json")
    assert first.exit_code == 0, first.output
    assert _dump(out) == _dump(fake_mps_db)
    again = run_cli("merge", fake_mps_db, fake_mps_db, "-o", out, "--json")
    reports = json.loads(again.stdout)
    assert all(n == 0 for r in reports for n in r["rows_added"].values())
    assert _dump(out) == _dump(fake_mps_db)


@pytest.mark.slow
def test_two_torch_versions_give_per_version_history(fake_mps_db, tmp_path, _counts, rows, run_cli):
    older = _as_other_torch(fake_mps_db, tmp_path / "older.db", "2.9.0")
    out = str(tmp_path / "all.db")
    result = run_cli("merge", fake_mps_db, older, "-o", out)
    assert result.exit_code == 0, result.output
    assert _counts(out)["results"] == 2 * _counts(fake_mps_db)["results"]
    versions = [r["torch_version"] for r in rows(
        out, "SELECT torch_version FROM op_history WHERE op_id = 'exp' AND dtype = 'float16' "
             "ORDER BY torch_version_key")]
    (current,) = {r["torch_version"] for r in rows(fake_mps_db, "SELECT torch_version FROM runs")}
    assert versions == ["2.9.0", current]
    (exp,) = rows(out, "SELECT * FROM op_firsts WHERE op_id = 'exp' AND dtype = 'float16'")
    assert (exp["first_pass_torch"], exp["last_fail_torch"]) == ("2.9.0", current)
    assert exp["regressed"] == 1 and exp["latest_status"] == "mismatch"
    assert json.loads(exp["statuses"]) == {"2.9.0": "pass", current: "mismatch"}


@pytest.mark.slow
def test_a_resumed_run_brings_only_its_new_results(fake_mps_db, tmp_path, _dump, rows, run_cli):
    partial = tmp_path / "partial.db"
    shutil.copy(fake_mps_db, partial)
    conn = sqlite3.connect(partial)
    with conn:
        conn.execute("DELETE FROM results WHERE op_id = 'add'")
        conn.execute("DELETE FROM pairs_done WHERE op_id = 'add'")
        conn.execute("UPDATE runs SET state = 'interrupted', cases_total = cases_total - 1")
    conn.close()
    out = str(tmp_path / "all.db")
    assert run_cli("merge", partial, "-o", out).exit_code == 0
    assert rows(out, "SELECT state FROM runs") == [{"state": "interrupted"}]
    result = run_cli("merge", fake_mps_db, partial, "-o", out, "--json")
    complete, stale = json.loads(result.stdout)
    n_add = len(rows(fake_mps_db, "SELECT 1 FROM results WHERE op_id = 'add'"))
    assert (complete["runs_updated"], complete["rows_added"]["results"]) == (1, n_add)
    assert (stale["runs_updated"], stale["rows_added"]["results"]) == (0, 0)  # older copy: ignored
    assert _dump(out) == _dump(fake_mps_db)


def test_older_schema_source_is_migrated_in_a_copy(tmp_path, monkeypatch, history_runs, rows, run_cli, v1_db):
    old = v1_db(tmp_path / "v1.db", history_runs)
    data = open(old, "rb").read()
    out = str(tmp_path / "all.db")
    result = run_cli("merge", old, "-o", out)
    assert result.exit_code == 0 and "schema 1, migrated in a copy" in result.output
    assert open(old, "rb").read() == data and schema.inspect(old) == 1
    keys = {r["torch_version"]: r["torch_version_key"] for r in rows(out, "SELECT * FROM runs")}
    assert keys == {v[0]: version_key(v[0]) for v in history_runs.values()}


@pytest.mark.slow
def test_incompatible_sources_are_refused_and_nothing_is_written(fake_mps_db, tmp_path, run_cli):
    future = tmp_path / "future.db"
    shutil.copy(fake_mps_db, future)
    conn = sqlite3.connect(future)
    with conn:
        conn.execute("UPDATE mpsprobe_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    text = tmp_path / "notes.db"
    text.write_text("not a database")
    out = tmp_path / "all.db"
    for source, message in [(future, "schema version 99"), (foreign, "not an mpsprobe one"),
                            (text, "not an SQLite database"), (tmp_path / "nope.db", "no such")]:
        result = run_cli("merge", fake_mps_db, source, "-o", out)
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
        assert not out.exists()
    assert run_cli("merge", fake_mps_db, "-o", fake_mps_db).exit_code == 2


@pytest.mark.slow
def test_a_failed_merge_leaves_the_output_unchanged(fake_mps_db, tmp_path, monkeypatch, _dump, run_cli):
    out = str(tmp_path / "all.db")
    older = _as_other_torch(fake_mps_db, tmp_path / "older.db", "2.9.0")
    assert run_cli("merge", fake_mps_db, "-o", out).exit_code == 0
    before = _dump(out)
    real = merge_module._merge_table

    def failing(src_conn, db, table, columns):
        if table == "results":
            raise sqlite3.OperationalError("disk I/O error")
        return real(src_conn, db, table, columns)
    monkeypatch.setattr(merge_module, "_merge_table", failing)
    with pytest.raises(sqlite3.OperationalError):
        merge_module.merge([older], out)
    assert _dump(out) == before    # the other run's row, ops and cases were rolled back
