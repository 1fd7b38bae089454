"""Schema versions: a version-1 database is migrated for real, atomically; a newer one is refused."""
import json
import sqlite3

import pytest

from mpsprobe.db import schema, views as history
from mpsprobe.engine.environment import version_key

from conftest import rows, run_cli


def _v1_db(path, monkeypatch, runs):
    """A database exactly as an mpsprobe with only migration 1 would write it.

    `runs`: {run_id: (torch_version, os_version, {(op, dtype): status})}.
    """
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        m.setattr(schema, "SCHEMA_VERSION", 1)
        db = schema.open_db(path)
    with db.conn:
        for run_id, (torch_version, os_version, statuses) in runs.items():
            db["runs"].insert({"id": run_id, "run_key": run_id, "state": "complete",
                               "started": f"2025-01-0{len(run_id) % 9 + 1}T00:00:00",
                               "torch_version": torch_version, "os_name": "macOS",
                               "os_version": os_version, "device": "mps",
                               "device_name": "Apple MPS", "options": "{}"})
            for (op, dtype), status in statuses.items():
                db.execute("INSERT OR IGNORE INTO ops (id, name) VALUES (?, ?)", [op, op])
                case = f"{op}|{dtype}|0"
                db.execute("INSERT OR IGNORE INTO cases (id, op_id, dtype, sample_index) "
                           "VALUES (?, ?, ?, 0)", [case, op, dtype])
                db["results"].insert({"run_id": run_id, "case_id": case, "op_id": op,
                                      "dtype": dtype, "status": status})
    db.conn.close()
    return str(path)


def _schema_dump(path):
    return rows(path, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")


HISTORY = {
    # "2.10.0" < "2.9.0" as strings: the views must compare versions as versions.
    "r-old": ("2.8.0", "14.5", {("atan2", "float16"): "unsupported", ("add", "float32"): "pass"}),
    "r-mid": ("2.9.0", "15.1", {("atan2", "float16"): "pass", ("add", "float32"): "pass"}),
    "r-new": ("2.10.0", "15.2", {("atan2", "float16"): "pass", ("add", "float32"): "mismatch"}),
    "r-newest": ("2.10.1", "15.3", {("atan2", "float16"): "pass", ("add", "float32"): "pass"}),
}


def test_version_key_orders_versions_not_strings():
    ordered = ["2.1.0", "2.6.0.dev20241001", "2.6.0.dev20241002+cpu", "2.6.0rc1", "2.6.0",
               "2.9.1", "2.10.0+cu121", "2.10.1"]
    assert sorted(ordered, key=version_key) == ordered
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert version_key("2.5.1") == version_key("2.5.1+cpu")  # a build, not another version
    assert version_key("not a version") is None


def test_v1_database_is_migrated_with_its_data(tmp_path, monkeypatch):
    path = _v1_db(tmp_path / "v1.db", monkeypatch, HISTORY)
    assert schema.inspect(path) == 1
    assert "torch_version_key" not in {r["name"] for r in rows(path, "PRAGMA table_info(runs)")}
    results_before = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")

    result = run_cli("migrate", path)
    assert result.exit_code == 0 and f"schema version 1 -> {schema.SCHEMA_VERSION}" in result.output
    assert schema.inspect(path) == schema.SCHEMA_VERSION
    after = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")
    assert [{k: r[k] for k in old} for r, old in zip(after, results_before)] == results_before
    keys = {r["id"]: r["torch_version_key"] for r in rows(path, "SELECT * FROM runs")}
    assert keys == {run_id: version_key(v[0]) for run_id, v in HISTORY.items()}
    assert f"already at schema version {schema.SCHEMA_VERSION}" in run_cli("migrate", path).output


def test_history_views_compare_versions_as_versions(tmp_path, monkeypatch):
    path = _v1_db(tmp_path / "v1.db", monkeypatch, HISTORY)
    schema.open_db(path).conn.close()
    history_rows = rows(path, "SELECT * FROM op_history WHERE op_id = 'atan2' "
                              "ORDER BY torch_version_key")
    assert [(r["torch_version"], r["status"], r["os_major"]) for r in history_rows] == [
        ("2.8.0", "unsupported", 14), ("2.9.0", "pass", 15), ("2.10.0", "pass", 15),
        ("2.10.1", "pass", 15)]
    assert {r["run_id"] for r in history_rows} == set(HISTORY)

    firsts = {(r["op_id"], r["os_major"]): r for r in rows(path, "SELECT * FROM op_firsts")}
    # Per OS major: macOS 14 saw only 2.8.0; macOS 15 saw 2.9.0 .. 2.10.1.
    atan2_14, atan2_15 = firsts[("atan2", 14)], firsts[("atan2", 15)]
    assert (atan2_14["first_pass_torch"], atan2_14["last_fail_torch"]) == (None, "2.8.0")
    assert atan2_15["first_pass_torch"] == "2.9.0"          # not "2.10.0", the string minimum
    assert atan2_15["latest_torch"] == "2.10.1"             # not "2.9.0", the string maximum
    assert atan2_15["last_fail_torch"] is None and not atan2_15["regressed"]
    add_15 = firsts[("add", 15)]
    assert (add_15["first_pass_torch"], add_15["last_fail_torch"]) == ("2.9.0", "2.10.0")
    assert add_15["regressed"] == 1 and add_15["passing_since_torch"] == "2.10.1"
    assert add_15["latest_status"] == "pass"
    assert json.loads(add_15["statuses"]) == {"2.9.0": "pass", "2.10.0": "mismatch",
                                              "2.10.1": "pass"}


def test_failed_migration_leaves_the_database_unchanged(tmp_path, monkeypatch):
    path = _v1_db(tmp_path / "v1.db", monkeypatch, HISTORY)
    before = _schema_dump(path)

    def broken(db):
        history.migrate_2(db)      # DDL and updates that must all be undone
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(schema, "MIGRATIONS", [schema.MIGRATIONS[0], broken])
    with pytest.raises(RuntimeError, match="disk on fire"):
        schema.open_db(path)
    assert schema.inspect(path) == 1
    assert _schema_dump(path) == before
    assert rows(path, "SELECT count(*) AS n FROM results")[0]["n"] == 8

    monkeypatch.undo()
    schema.open_db(path).conn.close()   # and the real migration still succeeds afterwards
    assert schema.inspect(path) == schema.SCHEMA_VERSION


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "future.db"
    schema.open_db(path).conn.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE mpsprobe_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    data = path.read_bytes()
    with pytest.raises(schema.DatabaseError, match="schema version 99.*upgrade mpsprobe"):
        schema.open_db(path)
    result = run_cli("migrate", path)
    assert result.exit_code == 2 and "upgrade mpsprobe" in result.output
    assert path.read_bytes() == data


def test_old_database_opened_read_only_points_at_migrate(tmp_path, monkeypatch):
    path = _v1_db(tmp_path / "v1.db", monkeypatch, HISTORY)
    with pytest.raises(schema.DatabaseError, match="mpsprobe migrate"):
        schema.open_db(path, readonly=True)
    assert schema.inspect(path) == 1
