"""Schema versions: a version-1 database is migrated for real, atomically; a newer one is refused."""
import json
import shutil
import sqlite3

import pytest

from mpsprobe.db import schema
from mpsprobe.db.migrations import m002_history
from mpsprobe.versions import version_key


@pytest.fixture(scope="session")
def _schema_dump(rows):
    def _schema_dump(path):
        return rows(path, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
    return _schema_dump


def test_version_key_orders_versions_not_strings():
    ordered = ["2.1.0", "2.6.0.dev20241001", "2.6.0.dev20241002+cpu", "2.6.0rc1", "2.6.0",
               "2.9.1", "2.10.0+cu121", "2.10.1"]
    assert sorted(ordered, key=version_key) == ordered
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert version_key("2.5.1") == version_key("2.5.1+cpu")  # a build, not another version
    assert version_key("not a version") is None


def test_version_key_orders_post_releases_after_their_release():
    # The hand-written parser stopped at "2.1.0" and sorted the post-release equal to it.
    ordered = ["2.1.0rc2", "2.1.0", "2.1.0.post1", "2.1.0.post2+cpu", "2.1.1"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    assert version_key("2.1.0.post1") > version_key("2.1.0")
    assert version_key("14.4.1 (23E224)") == version_key("14.4.1")   # leading numbers still read


def test_v1_database_is_migrated_with_its_data(tmp_path, history_runs, rows, run_cli, v1_db):
    path = v1_db(tmp_path / "v1.db", history_runs)
    assert schema.inspect(path) == 1
    assert "torch_version_key" not in {r["name"] for r in rows(path, "PRAGMA table_info(runs)")}
    results_before = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")

    result = run_cli("migrate", path)
    assert result.exit_code == 0 and f"schema version 1 -> {schema.SCHEMA_VERSION}" in result.output
    assert schema.inspect(path) == schema.SCHEMA_VERSION
    after = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")
    assert [{k: r[k] for k in old} for r, old in zip(after, results_before)] == results_before
    keys = {r["id"]: r["torch_version_key"] for r in rows(path, "SELECT * FROM runs")}
    assert keys == {run_id: version_key(v[0]) for run_id, v in history_runs.items()}
    assert f"already at schema version {schema.SCHEMA_VERSION}" in run_cli("migrate", path).output


def test_history_views_compare_versions_as_versions(tmp_path, history_runs, rows, v1_db):
    path = v1_db(tmp_path / "v1.db", history_runs)
    schema.open_db(path).conn.close()
    history_rows = rows(path, "SELECT * FROM op_history WHERE op_id = 'atan2' "
                              "ORDER BY torch_version_key")
    assert [(r["torch_version"], r["status"], r["os_major"]) for r in history_rows] == [
        ("2.8.0", "unsupported", 14), ("2.9.0", "pass", 15), ("2.10.0", "pass", 15),
        ("2.10.1", "pass", 15)]
    assert {r["run_id"] for r in history_rows} == set(history_runs)

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


def test_failed_migration_leaves_the_database_unchanged(tmp_path, monkeypatch, _schema_dump, history_runs, rows, v1_db):
    path = v1_db(tmp_path / "v1.db", history_runs)
    before = _schema_dump(path)

    def broken(db):
        m002_history.migrate(db)   # DDL and updates that must all be undone
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


def test_newer_schema_is_refused_untouched(tmp_path, run_cli):
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


def test_old_database_opened_read_only_points_at_migrate(tmp_path, history_runs, v1_db):
    path = v1_db(tmp_path / "v1.db", history_runs)
    with pytest.raises(schema.DatabaseError, match="mpsprobe migrate"):
        schema.open_db(path, readonly=True)
    assert schema.inspect(path) == 1


@pytest.fixture(scope="session")
def _shape(rows):
    def _shape(path):
        """Every table, index, trigger and view as SQLite keeps it, and each table's columns."""
        found = {(r["type"], r["name"]): r["sql"] for r in rows(
            path, "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
        for (kind, name) in list(found):
            if kind == "table":
                found[("columns", name)] = [tuple(c.values()) for c in rows(path, f"PRAGMA table_info('{name}')")]
        return found
    return _shape


@pytest.mark.parametrize("name, version", [("schema1.db", 1), ("schema2.db", 2)])
@pytest.mark.slow
def test_databases_the_old_code_wrote_upgrade_to_what_a_new_one_is(tmp_path, name, version, _shape, rows, run_cli,
                                                                  old_databases):
    """tests/data holds databases written by mpsprobe as it shipped schemas 1 and 2
    (a CPU sweep of add and abs; schema 2 also a `check --run` replay)."""
    path = tmp_path / name
    shutil.copy(old_databases / name, path)
    assert schema.inspect(path) == version
    before = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")
    runs_before = rows(path, "SELECT * FROM runs ORDER BY id")
    result = run_cli("migrate", path)
    assert result.exit_code == 0 and f"schema version {version} -> {schema.SCHEMA_VERSION}" in result.output
    fresh = tmp_path / "fresh.db"
    schema.open_db(fresh).conn.close()
    assert _shape(path) == _shape(fresh)
    after = rows(path, "SELECT * FROM results ORDER BY run_id, case_id")
    assert [{k: r[k] for k in b} for r, b in zip(after, before)] == before   # ids and values kept
    assert {r["pass"] for r in after} == {"forward"}
    runs_after = rows(path, "SELECT * FROM runs ORDER BY id")
    for old, new in zip(runs_before, runs_after):
        assert {k: new[k] for k in old} == old
        assert new["torch_version_key"] == version_key(new["torch_version"])
        model = json.loads(old["options"]).get("source") == "model"
        assert new["source"] == ("model" if model else "opinfo")
    # The upgraded file answers like a new one: the run picker, the views, a new run.
    conn = sqlite3.connect(path)
    from mpsprobe.db.query import runs as runs_q
    assert runs_q.pick_run(conn)["source"] == "opinfo"
    assert {r[0] for r in conn.execute("SELECT status FROM op_dtype_status")} <= {"pass", "skip"}
    conn.close()
    result = run_cli("run", "--db", path, "--device", "cpu", "--ops", "add", "--dtypes", "float32",
                     "--samples", 1, "--no-timing", "--workers", 1, "--fresh")
    assert result.exit_code == 0, result.output


def test_migration_1_still_builds_the_tables_schema_1_shipped(tmp_path, old_databases):
    """Append-only: step 1 on an empty file makes exactly the tables and indexes of
    the schema-1 database the first release wrote (its views now live in db/views.py)."""
    import sqlite_utils
    from mpsprobe.db.migrations import m001_initial

    def tables(conn):
        return {(kind, name): sql for kind, name, sql in conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'index') "
            "AND name NOT LIKE 'sqlite_%' AND name != 'mpsprobe_meta'")}
    fresh = sqlite_utils.Database(tmp_path / "step1.db")
    m001_initial.migrate(fresh)
    shipped = sqlite3.connect(old_databases / "schema1.db")
    assert tables(fresh.conn) == tables(shipped) and len(tables(shipped)) == 8
    shipped.close()


def test_views_are_recreated_when_their_definitions_change(tmp_path, rows):
    path = tmp_path / "v.db"
    schema.open_db(path).conn.close()
    edit = sqlite3.connect(path)
    edit.executescript("DROP VIEW op_firsts; "
                       "UPDATE mpsprobe_meta SET value = 'old' WHERE key = 'views';")
    edit.close()
    schema.open_db(path).conn.close()           # a writer brings the views back
    assert rows(path, "SELECT count(*) AS n FROM op_firsts")[0]["n"] == 0
