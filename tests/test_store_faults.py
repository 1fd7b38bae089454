"""The store under faults: damaged files, odd paths, locks, a full disk, a source being written.

Every damaged shape is refused by every command in one line (exit 2) with
the file and its directory left exactly as they were; read-only commands
create nothing beside a database; a finished database is out of WAL mode;
another process's lock is waited out; a full disk is one line and the run
resumes; merge reads each source in one snapshot.
"""
import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mpsprobe.db import schema

MODEL = str(Path(__file__).parent / "models" / "convnet.py")
RUN = ["run", "--device", "cpu", "--ops", "abs", "--dtypes", "float32", "--samples", "1",
       "--no-timing", "--workers", "1"]


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def listing(folder):
    return sorted(p.name for p in Path(folder).iterdir())


def one_line_error(result, needle=""):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and needle in errors[0], result.output
    return errors[0]


def _sql(path, *statements):
    conn = sqlite3.connect(path)
    conn.isolation_level = None
    for statement in statements:
        conn.execute(statement)
    conn.close()


def _zero_mid(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(b"\0" * 8192)


SET_VERSION = "UPDATE mpsprobe_meta SET value = {} WHERE key = 'schema_version'"
DAMAGE = {
    "version 'three'": lambda p: _sql(p, SET_VERSION.format("'three'")),
    "version NULL": lambda p: _sql(p, SET_VERSION.format("NULL")),
    "version -1": lambda p: _sql(p, SET_VERSION.format("'-1'")),
    "current labelled 1": lambda p: _sql(p, SET_VERSION.format("'1'")),
    "results dropped": lambda p: _sql(p, "DROP TABLE results"),
    "runs.counts dropped": lambda p: _sql(p, "ALTER TABLE runs DROP COLUMN counts"),
    "8 KiB zeroed mid-file": _zero_mid,
    # SQLite quotes the damaged schema text in its message, newline and all.
    "schema text broken across lines": lambda p: _sql(
        p, "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = 'CREATE TABLE pairs_done (a, \"\n)' WHERE name = 'pairs_done'"),
}


def _commands(path, other):
    return {
        "run": RUN + ["--db", path],
        "findings": ["findings", "--db", path],
        "migrate": ["migrate", path],
        "serve": ["serve", path, "--port", "0"],
        "merge source": ["merge", path, "-o", other],
        "merge target": ["merge", other, "-o", path],
        "check": ["check", MODEL, "--db", path],
        "ops": ["ops", "abs", "--db", path],
        "declared": ["declared", "--db", path],
        "bench": ["bench", "--ops", "add", "--max-size", "1e2", "--device", "cpu", "--reps", "1",
                  "--db", path],
        "publish": ["publish", path, "package", "--dry-run"],
    }


@pytest.mark.parametrize("shape", sorted(DAMAGE))
@pytest.mark.slow
def test_every_damaged_shape_is_refused_by_every_command_untouched(tmp_path, shape, run_cli,
                                                                    small_store, rows):
    folder = tmp_path / "d"
    folder.mkdir()
    path = small_store(folder / "bad.db")
    DAMAGE[shape](str(path))
    other = small_store(tmp_path / "other.db", n=2)
    before, other_before = digest(path), digest(other)
    for name, args in _commands(path, other).items():
        result = run_cli(*args)
        one_line_error(result)
        assert digest(path) == before, (shape, name)
        assert listing(folder) == ["bad.db"], (shape, name)   # no -wal, -shm, journal
        assert digest(other) == other_before, (shape, name)


def _five_commands(path, tmp_path):
    return (RUN + ["--db", path], ["migrate", path], ["findings", "--db", path],
            ["serve", path], ["merge", path, "-o", tmp_path / "out.db"])


def test_a_symlink_to_dev_null_is_refused(tmp_path, run_cli):
    null = tmp_path / "null.db"
    null.symlink_to("/dev/null")
    for args in _five_commands(null, tmp_path):
        one_line_error(run_cli(*args), "not a regular file")
    assert listing(tmp_path) == ["null.db"]


def test_a_fifo_is_refused_without_opening(tmp_path):
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    procs = [(args, subprocess.Popen(   # in child processes: a FIFO opened blocks forever
        [sys.executable, "-m", "mpsprobe", *map(str, args)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)) for args in _five_commands(fifo, tmp_path)]
    for args, proc in procs:
        out, err = proc.communicate(timeout=60)   # a FIFO opened would block forever
        assert proc.returncode == 2, (args, err)
        assert "Traceback" not in err and "not a regular file" in err, (args, err)
    assert listing(tmp_path) == ["fifo.db"]


@pytest.mark.parametrize("name", ["a#b.db", "x%41y.db", "what?.db"])
@pytest.mark.slow
def test_paths_with_uri_characters_work_everywhere(tmp_path, name, run_cli, small_store):
    from mpsprobe.site import check_database, make_datasette
    import asyncio
    path = small_store(tmp_path / name)
    assert run_cli("migrate", path).exit_code == 0
    merged = run_cli("merge", path, "-o", tmp_path / "all.db")
    assert merged.exit_code == 0, merged.output
    check_database(str(path))
    ds = make_datasette(str(path))

    async def page():
        await ds.invoke_startup()
        db = [d for n, d in ds.databases.items() if not n.startswith("_")][0]
        return (await db.execute("SELECT count(*) FROM results")).first()[0]
    assert asyncio.run(page()) == 40
    for args in (["ops", "abs", "--db", path], ["check", MODEL, "--db", path], RUN + ["--db", path]):
        result = run_cli(*args)
        assert result.exit_code in (0, 1) and "Error" not in result.output, (args, result.output)
    # findings reads the run (and wants declarations this store has none of)
    assert "measured on cpu" in run_cli("findings", "--db", path).output
    assert listing(tmp_path) == sorted([name, "all.db"])


# ------------------------------------------------------------ read-only media

def test_a_finished_database_is_one_file_out_of_wal(tmp_path, small_store):
    path = small_store(tmp_path / "done.db")
    assert path.read_bytes()[18:20] == b"\x01\x01"       # rollback journal, not WAL
    assert listing(tmp_path) == ["done.db"]


def test_read_only_commands_create_nothing_even_on_a_wal_database(tmp_path, run_cli, small_store):
    path = small_store(tmp_path / "wal.db")
    _sql(str(path), "PRAGMA journal_mode = WAL")      # as a killed run leaves it
    assert path.read_bytes()[18:20] == b"\x02\x02"
    before = digest(path)
    for args in (["migrate", path], ["merge", path, "-o", tmp_path / "sub" / "x.db"],
                 ["findings", "--db", path]):
        run_cli(*args)
        assert listing(tmp_path) == ["wal.db"], args
    from mpsprobe.site import check_database
    check_database(str(path))
    schema.open_db(path, readonly=True).conn.close()
    assert listing(tmp_path) == ["wal.db"] and digest(path) == before


# ------------------------------------------------------------ locks

def _hold_lock(path, seconds, started):
    conn = sqlite3.connect(path)
    conn.isolation_level = None
    conn.execute("BEGIN IMMEDIATE")
    started.set()
    time.sleep(seconds)
    conn.execute("ROLLBACK")
    conn.close()


def test_a_held_lock_is_waited_out_with_a_message(tmp_path, small_store, monkeypatch):
    from mpsprobe.db.writer import RunWriter
    path = small_store(tmp_path / "busy.db")
    monkeypatch.setattr(schema, "LOCK_POLL_S", 0.2)
    db = schema.open_db(path)
    writer = RunWriter.start(db, "k2", {"device": "cpu"}, {}, "0", os.getpid())
    said, started = [], threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(str(path), 2.0, started))
    holder.start()
    started.wait()
    t0 = time.monotonic()
    with schema.write_transaction(db.conn, say=said.append):
        db.execute("UPDATE runs SET wall_s = 1 WHERE id = ?", [writer.run_id])
    holder.join()
    assert time.monotonic() - t0 >= 1.5
    assert said and "locked by another process" in said[0]

    monkeypatch.setattr(schema, "LOCK_WAIT_LIMIT_S", 0.5)
    started.clear()
    holder = threading.Thread(target=_hold_lock, args=(str(path), 2.0, started))
    holder.start()
    started.wait()
    writer.record({"op": "x", "dtype": "f"}, 0, "s", {"status": "pass"})   # held until the pair ends
    with pytest.raises(schema.DatabaseError, match="stayed locked"):
        writer.pair_done({"op": "x", "dtype": "f"}, 1)
    holder.join()
    schema.close(db)


@pytest.mark.slow
def test_a_sweep_waits_out_a_lock_held_past_sqlites_busy_timeout(tmp_path, rows):
    """exp's case waits for a file; meanwhile another process takes the write lock and
    holds it past LOCK_POLL_S, so the sweep's commit of exp's pair meets a locked database."""
    import json
    db, hold = tmp_path / "held.db", tmp_path / "hold"
    hold.mkdir()
    env = dict(os.environ, FAULTY=json.dumps({"aten::exp": "wait", "once_dir": str(hold)}))
    sweep = subprocess.Popen(
        [sys.executable, "-m", "mpsprobe", "run", "--db", str(db), "--backend",
         str(Path(__file__).parent / "faulty_backend.py"), "--ops", "abs,exp,neg", "--dtypes",
         "float32", "--samples", "1", "--no-timing", "--workers", "1", "--passes", "forward"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while not (hold / "aten__exp").exists() and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (hold / "aten__exp").exists(), "the sweep never reached exp"
        started = threading.Event()
        holder = threading.Thread(target=_hold_lock, args=(str(db), schema.LOCK_POLL_S + 3, started))
        holder.start()
        started.wait()
        (hold / "go").touch()
        holder.join()
    finally:
        (hold / "go").touch()
        out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "is locked by another process; waiting" in err, err[-2000:]
    assert [r["status"] for r in rows(db, "SELECT status FROM results")] == ["pass"] * 3
    assert [r["state"] for r in rows(db, "SELECT state FROM runs")] == ["complete"]


# ------------------------------------------------------------ a full disk

def _page_limit(monkeypatch, extra):
    """Every writable connection may grow the file by `extra` pages only, as on a full disk."""
    real = schema._connect

    def limited(path):
        conn = real(path)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {max(1, pages + extra)}")
        return conn
    monkeypatch.setattr(schema, "_connect", limited)


@pytest.mark.slow
def test_a_full_disk_on_creation_leaves_no_stub(tmp_path, run_cli, small_store, monkeypatch):
    source = small_store(tmp_path / "src.db")
    _page_limit(monkeypatch, 1)
    result = run_cli("merge", source, "-o", tmp_path / "new.db")
    one_line_error(result, "disk is full")
    one_line_error(run_cli(*RUN, "--db", tmp_path / "new.db"), "disk is full")
    with pytest.raises(schema.DatabaseError, match="disk is full"):
        schema.open_db(tmp_path / "new2.db")
    assert listing(tmp_path) == ["src.db"]


FULL_OPS = "abs,neg,add,mul,sub,exp"


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_line_and_the_run_resumes(tmp_path, run_cli, rows, monkeypatch):
    db = tmp_path / "full.db"
    schema.close(schema.open_db(db))
    _sql(str(db), "VACUUM")   # no free page left: every page a result needs is new
    command = ["run", "--db", db, "--device", "cpu", "--ops", FULL_OPS, "--dtypes", "float32",
               "--samples", "8", "--no-timing", "--workers", "1"]
    with monkeypatch.context() as m:
        _page_limit(m, 0)   # the run row and a few results fit, not all
        result = run_cli(*command)
    one_line_error(result, "disk is full")
    kept = rows(db, "SELECT case_id FROM results")
    assert [r["state"] for r in rows(db, "SELECT state FROM runs")] != ["complete"]
    again = run_cli(*command)
    assert again.exit_code == 0, again.output
    ids = [r["case_id"] for r in rows(db, "SELECT case_id FROM results")]
    assert len(ids) == len(set(ids)) and set(r["case_id"] for r in kept) <= set(ids)
    assert [r["state"] for r in rows(db, "SELECT state FROM runs")] == ["complete"]
    assert rows(db, "PRAGMA integrity_check")[0]["integrity_check"] == "ok"


# ------------------------------------------------------------ merge while a run writes

WRITER = """
import os, sys, time
from mpsprobe.db import schema
from mpsprobe.db.writer import RunWriter
db = schema.open_db(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    w = RunWriter.start(db, f"k{n}", {"device": "cpu"}, {}, "0", os.getpid())
    for i in range(5):
        pair = {"op": f"op{n}_{i}", "dtype": "float32"}
        w.record(pair, 0, "s", {"status": "pass"})
        w.pair_done(pair, 1)
    w.finish("complete", 0.0)
    n += 1
schema.close(db)
"""


@pytest.mark.slow
def test_merge_reads_a_source_being_written_in_one_snapshot(tmp_path, run_cli, small_store, rows):
    source = small_store(tmp_path / "live.db", n=2)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(source), "6"])
    try:
        time.sleep(0.5)
        merges = 0
        while writer.poll() is None:
            result = run_cli("merge", source, "-o", tmp_path / "all.db")
            assert result.exit_code == 0, result.output
            merges += 1
    finally:
        writer.wait(timeout=60)
    assert merges >= 3
    assert rows(tmp_path / "all.db", "PRAGMA foreign_key_check") == []


def test_a_damaged_schema_text_is_named_on_one_line(tmp_path, small_store):
    """SQLite's message quotes the broken schema text, newline included: the error stays one line."""
    path = small_store(tmp_path / "bad.db")
    DAMAGE["schema text broken across lines"](str(path))
    with pytest.raises(schema.DatabaseError) as raised:
        schema.inspect(str(path))
    assert "unrecognized token" in str(raised.value) and "\n" not in str(raised.value)
