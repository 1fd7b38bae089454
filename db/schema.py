"""Opening a database safely: its schema version, migrating it, refusing what is not ours.

Every table an mpsprobe database holds is created by a numbered migration
(db/migrations/, append-only), so a database written by an older mpsprobe is
brought up to date and one written by a newer mpsprobe is refused. Views are
defined in db/views.py and recreated after migrating.

Before anything is written, a database is inspected (read-only, nothing
created beside it): the file itself (db/files.py), its schema version (a
number, not newer than ours), its tables and columns against what the
migrations make, and SQLite's quick_check, so a damaged file is refused in
one line instead of being written into. Every write transaction waits out
another process's lock (with a message) and turns a full disk into one line.
"""
import contextlib
import functools
import os
import sqlite3
import sys
import time

import sqlite_utils

from . import files, views
from .files import DatabaseError  # noqa: F401  (raised by every opener; part of this API)
from .migrations import MIGRATIONS

APP = "mpsprobe"
SCHEMA_VERSION = len(MIGRATIONS)
LOCK_POLL_S = 5.0           # SQLite's own busy wait, between our messages
LOCK_WAIT_LIMIT_S = 600.0   # then give up, in one line
# SQLite's answers that mean the file or its disk, not the code, is at fault.
_FILE_FAULTS = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_IOERR: "an I/O error",
    sqlite3.SQLITE_CORRUPT: "the database is damaged",
    sqlite3.SQLITE_NOTADB: "the file is not a database",
    sqlite3.SQLITE_READONLY: "the database is read-only",
    sqlite3.SQLITE_CANTOPEN: "the database cannot be opened",
}


def _path_of(conn):
    try:
        return conn.execute("PRAGMA database_list").fetchone()[2] or "the database"
    except sqlite3.Error:
        return "the database"


def _say_waiting(text):
    print(text, file=sys.stderr, flush=True)


def _file_fault(error, path):
    """A DatabaseError for an SQLite error caused by the file or its disk, else None."""
    code = getattr(error, "sqlite_errorcode", None)
    what = _FILE_FAULTS.get(code & 0xFF) if isinstance(code, int) else None
    if what is None:
        return None
    if code & 0xFF == sqlite3.SQLITE_FULL:
        return DatabaseError(f"cannot write {path}: {what}; free some space and run the same "
                             "command again (what was recorded is kept)")
    return DatabaseError(f"cannot write {path}: {what} ({error})")


def _locked(error):
    return isinstance(error, sqlite3.OperationalError) and (
        "locked" in str(error) or "busy" in str(error))


def wait_for_lock(conn, attempt, say=None):
    """Run attempt() until another process's write lock lets it through.

    SQLite waits LOCK_POLL_S itself; past that, this says so and backs off,
    up to LOCK_WAIT_LIMIT_S, then raises DatabaseError (never 'database is
    locked' as a traceback).
    """
    started = time.monotonic()
    pause, said = 0.1, 0.0
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as e:
            if not _locked(e):
                raise
            waited = time.monotonic() - started
            if waited > LOCK_WAIT_LIMIT_S:
                raise DatabaseError(f"{_path_of(conn)} stayed locked by another process for "
                                    f"{waited:.0f} s; try again when it is done") from None
            if waited - said >= 10 or said == 0:
                (say or _say_waiting)(f"{_path_of(conn)} is locked by another process; "
                                      f"waiting ({waited:.0f} s so far)")
                said = max(waited, 1e-9)
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


@contextlib.contextmanager
def write_transaction(conn, say=None):
    """One explicit transaction, holding SQLite's write lock from the start.

    DDL commits on its own under Python's default transaction handling, so this
    manages BEGIN IMMEDIATE / COMMIT / ROLLBACK itself: everything in the block
    happens, or nothing does, and no other writer can interleave. A lock held
    elsewhere is waited out (wait_for_lock); a full disk or a damaged file
    becomes a DatabaseError, with everything rolled back.
    """
    previous = conn.isolation_level
    conn.isolation_level = None
    try:
        wait_for_lock(conn, lambda: conn.execute("BEGIN IMMEDIATE"), say)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite rolled back on its own (a full disk, say)
            fault = _file_fault(e, _path_of(conn)) if isinstance(e, sqlite3.Error) else None
            if fault is not None:
                raise fault from None
            raise
    finally:
        conn.isolation_level = previous


# -- what a database must hold ---------------------------------------------------

def _schema_version(db, path):
    """The schema version the database says it has (None: not an mpsprobe database)."""
    if "mpsprobe_meta" not in db.table_names():
        return None
    row = db.execute("SELECT value FROM mpsprobe_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    value = row[0]
    text = str(value).strip() if value is not None else ""
    if not text.isdigit():
        raise DatabaseError(f"{path} has a damaged schema version ({value!r} is not a "
                            "version number)")
    return int(text)


@functools.lru_cache(maxsize=None)
def expected_columns(version):
    """{table: columns} that migrations 1..version make (built once, in memory)."""
    db = sqlite_utils.Database(sqlite3.connect(":memory:"))
    with write_transaction(db.conn):
        for step in MIGRATIONS[:version]:
            step(db)
    shadows = tuple(f"{n}_" for n in db.table_names() if db[n].virtual_table_using)
    found = {name: frozenset(db[name].columns_dict) for name in db.table_names()
             if not name.startswith(shadows or ("\0",))}
    db.conn.close()
    return found


def _check_structure(db, version, path):
    """Refuse a database missing a table or column its schema version promises."""
    present = set(db.table_names())
    for table, columns in sorted(expected_columns(version).items()):
        if table not in present:
            raise DatabaseError(f"{path} is damaged: schema version {version} has a "
                                f"`{table}` table, this file has none")
        missing = sorted(columns - set(db[table].columns_dict))
        if missing:
            raise DatabaseError(f"{path} is damaged: its `{table}` table lacks "
                                f"{', '.join(missing)}")


def _quick_check(conn, path):
    answer = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    if answer != "ok":
        answer = " ".join(answer.replace("*** in database main ***", "").split())
        raise DatabaseError(f"{path} is damaged (SQLite's check says: {answer}); "
                            "restore it from a copy")


def inspect(path, migratable=False):
    """The schema version of the mpsprobe database at `path` (None: new or empty).

    Reads only, creating nothing; raises DatabaseError, with a one-line
    message, for anything that is not a usable mpsprobe database.
    `migratable`: an older database is also migrated in a copy in memory, so
    a schema version that lies is caught before a writer starts any work.
    """
    path = str(path)
    head = files.check_path(path)
    if not head:
        return None
    conn = None
    try:
        conn = files.connect_ro(path, head)
        db = sqlite_utils.Database(conn)
        tables = db.table_names()
        version = _schema_version(db, path)
        if tables and version is None:
            raise DatabaseError(f"{path} is an SQLite database, but not an mpsprobe one")
        if version is not None and version > SCHEMA_VERSION:
            raise DatabaseError(
                f"{path} has schema version {version}; this mpsprobe reads up to "
                f"{SCHEMA_VERSION}: upgrade mpsprobe")
        if version is not None:
            _check_structure(db, version, path)
        _quick_check(conn, path)
        if migratable and version is not None and version < SCHEMA_VERSION:
            _try_migration(conn, version, path)
    except sqlite3.DatabaseError as e:
        raise DatabaseError(f"{path} is not a readable SQLite database ({e})") from None
    except UnicodeDecodeError as e:
        # Damaged bytes in the schema's own text (sqlite_master) need not decode.
        raise DatabaseError(f"{path} is damaged: its schema text does not decode ({e.reason})") from None
    finally:
        if conn is not None:
            conn.close()
    return version


def _try_migration(conn, version, path):
    copy = sqlite3.connect(":memory:")
    try:
        conn.backup(copy)
        _migrate(sqlite_utils.Database(copy), version, path)
    finally:
        copy.close()


def open_db(path, create=True, readonly=False, say=None):
    """Open (creating or migrating as needed) the mpsprobe database at `path`.

    `readonly=True` opens an up-to-date database without ever writing to it
    or creating anything beside it. Raises DatabaseError, with a one-line
    message, for anything that is not a usable mpsprobe database; nothing is
    written in that case, and a database this call created is removed again.
    `say(text)`: where a wait for another process's lock is reported.
    """
    path = str(path)
    if (readonly or not create) and not os.path.exists(path):
        # A read never speaks of creating: the file is simply not there.
        raise DatabaseError(f"cannot read {path}: it does not exist")
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
        return sqlite_utils.Database(files.connect_ro(path))
    if exists and not os.access(path, os.W_OK):
        raise DatabaseError(f"{path} is not writable")
    created = not os.path.exists(path)
    conn = _connect(path)
    db = sqlite_utils.Database(conn)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(db, version or 0, path, say)
        if not views.current(db):
            with write_transaction(conn, say):
                views.recreate(db)
        # WAL only once the file is known good: a refused file keeps its header.
        wait_for_lock(conn, lambda: conn.execute("PRAGMA journal_mode = WAL"), say)
        # In WAL mode, NORMAL survives a killed process intact; only a power cut can
        # drop the last few commits, and a resumed run re-records those cases.
        # (FULL syncs every result to disk: most of a cheap sweep's time.)
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException as e:
        conn.close()
        if created and _holds_nothing(path):
            files.remove(path)   # no 4 KiB stub left behind by a failed creation
        fault = _file_fault(e, path) if isinstance(e, sqlite3.Error) else None
        if fault is not None:
            raise fault from None
        raise
    return db


def _holds_nothing(path):
    """True when `path` has no table (a creation that failed before its first commit)."""
    try:
        conn = sqlite3.connect(files.uri(path, mode="ro"), uri=True)
        try:
            return not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return os.path.exists(path) and os.path.getsize(path) <= 65536


def _connect(path):
    """The one place a writable connection is made."""
    return sqlite3.connect(path, timeout=LOCK_POLL_S)


def close(db):
    """Close a database open_db opened for writing: one self-contained file, out of WAL."""
    files.leave(db.conn)


def _migrate(db, version, path, say=None):
    """Bring `db` from `version` to SCHEMA_VERSION in ONE transaction, DDL included.

    Python's sqlite3 commits before DDL in its default mode, so the connection
    is switched to manual control (isolation_level None) and the whole
    migration runs between BEGIN IMMEDIATE and COMMIT: a failure at any step
    rolls everything back and leaves the file as it was. The result must hold
    every table and column the schema promises, or nothing is kept.
    """
    if version == SCHEMA_VERSION:
        return
    conn = db.conn
    # IMMEDIATE takes the write lock now, so two processes opening the same
    # old database cannot both migrate it; the loser re-reads the version.
    with write_transaction(conn, say):
        current = _schema_version(db, path)
        if current is None:
            db.execute("CREATE TABLE mpsprobe_meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("INSERT INTO mpsprobe_meta VALUES ('app', ?)", [APP])
            db.execute("INSERT INTO mpsprobe_meta VALUES ('schema_version', '0')")
            current = 0
        if current > SCHEMA_VERSION:
            raise DatabaseError(f"schema version {current} is newer than this mpsprobe "
                                f"reads ({SCHEMA_VERSION}): upgrade mpsprobe")
        for number, step in enumerate(MIGRATIONS[current:SCHEMA_VERSION], current + 1):
            try:
                step(db)
            except sqlite3.OperationalError as e:
                if _file_fault(e, path) is not None:
                    raise
                raise DatabaseError(
                    f"{path} cannot be brought from schema version {current} to "
                    f"{SCHEMA_VERSION}: step {number} failed ({e}); is its schema "
                    "version right?") from None
            if not conn.in_transaction:
                raise RuntimeError(f"schema migration {number} committed on its own; "
                                   "migration steps must not commit")
        _check_structure(db, SCHEMA_VERSION, path)
        views.recreate(db)
        db.execute("UPDATE mpsprobe_meta SET value = ? WHERE key = 'schema_version'",
                   [str(SCHEMA_VERSION)])


def migrate(path):
    """Bring the database at `path` up to date; returns (version before, version now).

    A database already up to date is only read: migrate works on read-only media.
    """
    path = str(path)
    before = inspect(path)
    if before is None:
        raise DatabaseError(f"{path} does not exist or is empty: nothing to migrate")
    if before == SCHEMA_VERSION:
        db = open_db(path, readonly=True)
        try:
            up_to_date = views.current(db)
        finally:
            db.conn.close()
        if up_to_date:
            return before, SCHEMA_VERSION
    close(open_db(path))
    return before, SCHEMA_VERSION
