"""Opening a database safely: its schema version, migrating it, refusing what is not ours.

Every table an mpsprobe database holds is created by a numbered migration
(db/migrations/, append-only), so a database written by an older mpsprobe is
brought up to date and one written by a newer mpsprobe is refused. Views are
defined in db/views.py and recreated after migrating.
"""
import contextlib
import os
import sqlite3

import sqlite_utils

from mpsprobe.errors import MpsprobeError
from . import views
from .migrations import MIGRATIONS

APP = "mpsprobe"
SCHEMA_VERSION = len(MIGRATIONS)


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


class DatabaseError(MpsprobeError):
    """A database that cannot be used: not SQLite, not ours, too new, unwritable."""


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
    if not views.current(db):
        with write_transaction(db.conn):
            views.recreate(db)
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
        views.recreate(db)
        db.execute("UPDATE mpsprobe_meta SET value = ? WHERE key = 'schema_version'",
                   [str(SCHEMA_VERSION)])


def migrate(path):
    """Bring the database at `path` up to date; returns (version before, version now)."""
    before = inspect(path)
    if before is None:
        raise DatabaseError(f"{path} does not exist or is empty: nothing to migrate")
    open_db(path).conn.close()
    return before, SCHEMA_VERSION
