"""The full-text index: built by migration 3 from existing rows, kept by triggers."""
import pytest

from mpsprobe.db import schema


@pytest.fixture(scope="session")
def fts(rows):
    def fts(path, query):
        return {r["case_id"] for r in rows(
            path, "SELECT r.case_id FROM results_fts JOIN results r ON r.rowid = results_fts.rowid "
                  "WHERE results_fts MATCH ?", (query,))}
    return fts


def test_migration_indexes_existing_rows_and_triggers_keep_it(tmp_path, fts, rows, v1_db):
    path = v1_db(tmp_path / "old.db", {
        "r1": ("2.9.0", "15.1", {("nn.functional.max_pool2d", "float16"): "unsupported",
                                 ("add", "float32"): "pass"})})
    db = schema.open_db(path)  # migrates 1 -> 3
    assert fts(path, "max_pool2d") == {"nn.functional.max_pool2d|float16|0"}
    assert fts(path, "functional") == {"nn.functional.max_pool2d|float16|0"}
    with db.conn:
        db.execute("INSERT INTO cases (id, op_id, dtype, sample_index) "
                   "VALUES ('add|float16|0', 'add', 'float16', 0)")
        db.execute("INSERT INTO results (run_id, case_id, op_id, dtype, status, message) "
                   "VALUES ('r1', 'add|float16|0', 'add', 'float16', 'unsupported', "
                   "'The operator ''aten::add.out'' is not currently implemented for the MPS device')")
    assert fts(path, "implemented MPS") == {"add|float16|0"}
    with db.conn:
        db.execute("UPDATE results SET message = 'gone' WHERE case_id = 'add|float16|0'")
    assert fts(path, "implemented") == set() and fts(path, "gone") == {"add|float16|0"}
    with db.conn:
        db.execute("DELETE FROM results WHERE case_id = 'add|float16|0'")
    assert fts(path, "gone") == set()
    assert rows(path, "INSERT INTO results_fts (results_fts) VALUES ('integrity-check')") == []
