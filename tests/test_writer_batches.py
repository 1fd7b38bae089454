"""A pair's results are committed together: with the pair's end, or sooner when
many are held or they have been held a while; finishing a run commits the rest."""
import os

from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter


def _writer(tmp_path):
    db = schema.open_db(str(tmp_path / "batches.db"))
    return db, RunWriter.start(db, "key", {"device": "cpu"}, {}, "0", os.getpid())


def test_results_wait_for_their_pair_then_commit_with_it(tmp_path, results_count, rows):
    db, writer = _writer(tmp_path)
    path = str(tmp_path / "batches.db")
    pair = {"op": "add", "dtype": "float32"}
    writer.record(pair, 0, "f32[3]", {"status": "pass"})
    writer.record(pair, 1, "f32[4]", {"status": "mismatch"})
    assert results_count(path) == 0                     # another reader sees nothing yet
    assert rows(path, "SELECT * FROM pairs_done") == []
    writer.pair_done(pair, 2)
    assert results_count(path) == 2
    assert rows(path, "SELECT op_id, n_cases FROM pairs_done") == [{"op_id": "add", "n_cases": 2}]
    assert [r["id"] for r in rows(path, "SELECT id FROM ops")] == ["add"]
    schema.close(db)


def test_a_long_pair_is_committed_before_its_end(tmp_path, results_count, monkeypatch):
    db, writer = _writer(tmp_path)
    path = str(tmp_path / "batches.db")
    monkeypatch.setattr(RunWriter, "HOLD_ROWS", 3)
    pair = {"op": "mul", "dtype": "float32"}
    for i in range(4):
        writer.record(pair, i, "s", {"status": "pass"})
    assert results_count(path) == 3                      # the first three, the fourth held
    clock = [100.0]
    monkeypatch.setattr("mpsprobe.db.writer.time.monotonic", lambda: clock[0])
    writer._held_since = clock[0]
    clock[0] += RunWriter.HOLD_S                          # held long enough: the next one commits all
    writer.record(pair, 4, "s", {"status": "pass"})
    assert results_count(path) == 5
    schema.close(db)


def test_finishing_commits_what_is_held(tmp_path, results_count):
    db, writer = _writer(tmp_path)
    path = str(tmp_path / "batches.db")
    writer.record({"op": "sub", "dtype": "int32"}, 0, "s", {"status": "pass"})
    total, counts = writer.finish("interrupted", 1.0)
    assert total == 1 and counts["pass"] == 1
    assert results_count(path) == 1
    writer.close()
