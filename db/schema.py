"""The database schema, its version, and opening a database safely.

Every table an mpsprobe database holds is created here, and every change to
it is a numbered migration, so a database written by an older mpsprobe is
brought up to date and one written by a newer mpsprobe is refused.
"""
import contextlib
import os
import sqlite3

import sqlite_utils

from . import declared
from .status import STATUSES

APP = "mpsprobe"
SCHEMA_VERSION = 4


@contextlib.contextmanager
def write_transaction(conn):
    """One explicit transaction, holding SQLite's write lock from the start.

    DDL commits on its own under Python's default transaction handling, so this
    manages BEGIN IMMEDIATE / COMMIT / ROLLBACK itself: everything in the block
    happens, or nothing does, and no other writer can interleave.
    """
    previous = conn.isolation_level
    conn.isolation_level = None
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.isolation_level = previous


class DatabaseError(Exception):
    """A database that cannot be used: not SQLite, not ours, too new, unwritable."""


def _status_rank_sql(column="status"):
    whens = " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STATUSES))
    return f"CASE {column} {whens} END"


def _worst_status_sql(column="status"):
    whens = " ".join(f"WHEN {i} THEN '{s}'" for i, s in enumerate(STATUSES))
    return f"CASE max({_status_rank_sql(column)}) {whens} END"


def _status_counts_sql(column="status"):
    return ",\n  ".join(f"sum({column} = '{s}') AS n_{s}" for s in STATUSES)


def _migrate_1(db):
    db["runs"].create({
        "id": str,              # stable id: unique across machines, the merge key
        "run_key": str,         # what makes two invocations "the same run" (resume)
        "state": str,           # running | complete | interrupted
        "started": str, "finished": str,
        "mpsprobe_version": str,
        "torch_version": str, "torch_git": str, "python": str,
        "os_name": str, "os_version": str, "os_build": str, "kernel": str,
        "machine": str, "chip": str, "gpu_cores": int, "memory_bytes": int,
        "virtualized": int,
        "device": str,          # the target as named: mps, cuda, cpu, or a test backend
        "device_name": str,     # what the hardware calls itself
        "backend": str,         # a non-standard target backend (tests), else null
        "hostname": str, "pid": int,
        "options": str,         # JSON of the options that shaped the run
        "cases_total": int, "wall_s": float,
        "counts": str,          # JSON {status: n}
    }, pk="id")
    db["runs"].create_index(["run_key"])
    db["ops"].create({
        "id": str,              # OpInfo name, with ".variant" when it has one
        "name": str, "variant": str, "aten_name": str, "source": str,
    }, pk="id")
    db["cases"].create({
        "id": str,              # "op_id|dtype|sample_index"
        "op_id": str, "dtype": str, "sample_index": int,
        "sample": str,          # readable summary of the sample's shapes, dtypes, args
    }, pk="id", foreign_keys=[("op_id", "ops", "id")])
    db["results"].create({
        "run_id": str, "case_id": str,
        "op_id": str, "dtype": str,        # denormalised from cases for fast roll-ups
        "status": str,
        "check_kind": str,      # values | shape | none: how far the output could be checked
        "reason": str,          # one line on why the status is what it is
        "error_type": str, "message": str,
        "aten_op": str,         # the aten op an unsupported/error message names
        "fallback_ops": str,    # JSON list of aten ops that fell back to the CPU
        "aten_ops": str,        # JSON list of aten ops the case dispatched
        "max_abs_err": float, "max_rel_err": float,
        "ref_abs_err": float,   # the CPU's own error in this dtype, against float64
        "tol_atol": float, "tol_rtol": float, "tol_factor": float,
        "nonfinite_mismatch": int,
        "signal": int,
        "ref_ms": float, "target_ms": float, "speedup": float,
        "duration_s": float,
    }, pk=("run_id", "case_id"), foreign_keys=[
        ("run_id", "runs", "id"), ("case_id", "cases", "id"), ("op_id", "ops", "id"),
    ])
    db["results"].create_index(["op_id", "dtype"])
    db["results"].create_index(["status"])
    # A pair is marked here once all its samples are recorded, so a resumed
    # run skips it without regenerating samples.
    db["pairs_done"].create({
        "run_id": str, "op_id": str, "dtype": str, "n_cases": int,
    }, pk=("run_id", "op_id", "dtype"), foreign_keys=[("run_id", "runs", "id")])
    db.execute(f"""
CREATE VIEW op_dtype_status AS
SELECT run_id, op_id, dtype,
  {_worst_status_sql()} AS status,
  count(*) AS n_cases,
  {_status_counts_sql()},
  max(max_abs_err) AS max_abs_err,
  group_concat(DISTINCT CASE WHEN fallback_ops != '[]' THEN fallback_ops END) AS fallback_ops,
  group_concat(DISTINCT aten_op) AS aten_op,
  avg(speedup) AS mean_speedup
FROM results GROUP BY run_id, op_id, dtype""")
    db.execute(f"""
CREATE VIEW aten_op_status AS
SELECT results.run_id, je.value AS aten_op, results.dtype,
  {_worst_status_sql('results.status')} AS status,
  count(*) AS n_cases,
  {_status_counts_sql('results.status')},
  group_concat(DISTINCT results.op_id) AS via_ops
FROM results, json_each(results.aten_ops) AS je
WHERE results.aten_ops IS NOT NULL
GROUP BY results.run_id, je.value, results.dtype""")
    db.execute(f"""
CREATE VIEW run_status_counts AS
SELECT run_id, count(*) AS n_cases, {_status_counts_sql()}
FROM results GROUP BY run_id""")
    declared.create(db)


def _migrate_2(db):
    from . import views as history
    history.migrate_2(db)


def _migrate_3(db):
    from .migrations import m003_search as search
    search.migrate_3(db)


def _migrate_4(db):
    """Why a result is what it is, and what a Mac run ran under: reason kind, minimum
    macOS, a crash's stderr, notes (JSON); Rosetta and the MPS settings (JSON)."""
    for table, columns in (("results", ("reason_kind", "min_macos", "stderr_tail", "notes")),
                           ("runs", ("translated", "device_env"))):
        have = set(db[table].columns_dict)
        for name in columns:
            if name not in have:
                kind = "INTEGER" if name == "translated" else "TEXT"
                db.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" {kind}')


# Ordered: MIGRATIONS[i] takes a database from version i to version i + 1.
# A step runs inside the migration's transaction: it must not commit (no
# `with db.conn:`); nested sqlite-utils calls use savepoints, which is fine.
MIGRATIONS = [_migrate_1, _migrate_2, _migrate_3, _migrate_4]


def _schema_version(db):
    if "mpsprobe_meta" not in db.table_names():
        return None
    row = db.execute("SELECT value FROM mpsprobe_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def _check_file(path):
    """Refuse paths that cannot be, or are not, an mpsprobe database, writing nothing."""
    if os.path.isdir(path):
        raise DatabaseError(f"{path} is a directory, not a database file")
    if os.path.exists(path):
        with open(path, "rb") as f:
            head = f.read(100)
        if head and head[:16] != b"SQLite format 3\x00":
            raise DatabaseError(f"{path} is not an SQLite database")
        _check_length(path, head)
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise DatabaseError(f"cannot create {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise DatabaseError(f"cannot create {path}: directory {parent} is not writable")


def _check_length(path, head):
    """Refuse a file shorter than its own header says: SQLite only notices lost
    pages when it reads them, so a truncated database could be written to."""
    if len(head) < 100:
        return
    wal = f"{path}-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        return  # a checkpoint in progress writes page 1 first: the file may lag its header
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The header's page count is only valid when these two counters agree.
    if pages and head[24:28] == head[92:96] and os.path.getsize(path) < pages * page_size:
        raise DatabaseError(f"{path} is truncated: {os.path.getsize(path)} bytes, its header "
                            f"says {pages * page_size}")


def inspect(path):
    """The schema version of the mpsprobe database at `path` (None: new or empty).

    Reads only; raises DatabaseError, with a one-line message, for anything that
    is not a usable mpsprobe database.
    """
    path = str(path)
    _check_file(path)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    conn = None
    try:
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
        db = sqlite_utils.Database(conn)
        tables = db.table_names()
        version = _schema_version(db)
    except sqlite3.DatabaseError as e:
        raise DatabaseError(f"{path} is not a readable SQLite database ({e})") from None
    finally:
        if conn is not None:
            conn.close()
    if tables and version is None:
        raise DatabaseError(f"{path} is an SQLite database, but not an mpsprobe one")
    if version is not None and version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path} has schema version {version}; this mpsprobe reads up to "
            f"{SCHEMA_VERSION}: upgrade mpsprobe")
    return version


def open_db(path, create=True, readonly=False):
    """Open (creating or migrating as needed) the mpsprobe database at `path`.

    `readonly=True` opens an up-to-date database without ever writing to it.
    Raises DatabaseError, with a one-line message, for anything that is not a
    usable mpsprobe database; nothing is written in that case.
    """
    path = str(path)
    version = inspect(path)
    exists = os.path.exists(path) and os.path.getsize(path) > 0
    if not exists and (readonly or not create):
        raise DatabaseError(f"{path} does not exist or is empty")
    if readonly:
        if version is None:
            raise DatabaseError(f"{path} is empty, not an mpsprobe database")
        if version < SCHEMA_VERSION:
            raise DatabaseError(
                f"{path} has schema version {version}; bring it to {SCHEMA_VERSION} with "
                f"`mpsprobe migrate {path}`")
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
        return sqlite_utils.Database(conn)
    if exists and not os.access(path, os.W_OK):
        raise DatabaseError(f"{path} is not writable")
    db = sqlite_utils.Database(sqlite3.connect(path, timeout=30))
    db.execute("PRAGMA journal_mode = WAL")
    # In WAL mode, NORMAL survives a killed process intact; only a power cut can
    # drop the last few commits, and a resumed run re-records those cases.
    # (FULL syncs every result to disk: most of a cheap sweep's time.)
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")
    _migrate(db, version or 0)
    return db


def _migrate(db, version):
    """Bring `db` from `version` to SCHEMA_VERSION in ONE transaction, DDL included.

    Python's sqlite3 commits before DDL in its default mode, so the connection
    is switched to manual control (isolation_level None) and the whole
    migration runs between BEGIN IMMEDIATE and COMMIT: a failure at any step
    rolls everything back and leaves the file as it was.
    """
    if version == SCHEMA_VERSION:
        return
    conn = db.conn
    # IMMEDIATE takes the write lock now, so two processes opening the same
    # old database cannot both migrate it; the loser re-reads the version.
    with write_transaction(conn):
        current = _schema_version(db)
        if current is None:
            db.execute("CREATE TABLE mpsprobe_meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("INSERT INTO mpsprobe_meta VALUES ('app', ?)", [APP])
            db.execute("INSERT INTO mpsprobe_meta VALUES ('schema_version', '0')")
            current = 0
        if current > SCHEMA_VERSION:
            raise DatabaseError(f"schema version {current} is newer than this mpsprobe "
                                f"reads ({SCHEMA_VERSION}): upgrade mpsprobe")
        for number, step in enumerate(MIGRATIONS[current:SCHEMA_VERSION], current + 1):
            step(db)
            if not conn.in_transaction:
                raise RuntimeError(f"schema migration {number} committed on its own; "
                                   "migration steps must not commit")
        db.execute("UPDATE mpsprobe_meta SET value = ? WHERE key = 'schema_version'",
                   [str(SCHEMA_VERSION)])


def migrate(path):
    """Bring the database at `path` up to date; returns (version before, version now)."""
    before = inspect(path)
    if before is None:
        raise DatabaseError(f"{path} does not exist or is empty: nothing to migrate")
    open_db(path).conn.close()
    return before, SCHEMA_VERSION
