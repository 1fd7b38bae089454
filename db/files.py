"""The database file itself: what may be opened, how to name it to SQLite, and
how to leave it so that read-only media can use it.

- A path is looked at (stat, never opened) before SQLite sees it: a FIFO, a
  device (a symlink to /dev/null) or a directory is refused, as is a file that
  is not SQLite or is shorter than its own header says.
- Read-only opens go through `file:` URIs with the path quoted, so `#`, `?` and
  `%41` in a file name mean themselves; and they create nothing beside the
  file (a WAL database with no -wal file is opened immutable).
- A writer that is done checkpoints and switches the file out of WAL mode, so
  the file alone is the database and no reader needs to create -wal/-shm.
"""
import os
import sqlite3
import stat
import urllib.parse

from mpsprobe.errors import MpsprobeError

HEADER = b"SQLite format 3\x00"
SIDECARS = ("-wal", "-shm", "-journal")


class DatabaseError(MpsprobeError):
    """A database that cannot be used: not SQLite, not ours, too new, unwritable, damaged.

    Always one line: SQLite quotes a damaged schema's text in its messages, newlines and all."""

    def __init__(self, message=""):
        super().__init__(" ".join(part.strip() for part in str(message).splitlines() if part.strip()))


def uri(path, **params):
    """A `file:` URI for `path`, quoted so that every character means itself."""
    query = urllib.parse.urlencode(params)
    return f"file:{urllib.parse.quote(os.path.abspath(path))}" + (f"?{query}" if query else "")


def check_path(path):
    """Refuse, from stat and the first 100 bytes, what cannot be an mpsprobe
    database; returns the header bytes read (b"" for a new or empty file)."""
    try:
        info = os.stat(path)   # follows symlinks: a link to /dev/null is a device
    except FileNotFoundError:
        if os.path.lexists(path):
            raise DatabaseError(f"{path} is a broken symbolic link") from None
        _check_new(path)
        return b""
    except OSError as e:
        raise DatabaseError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise DatabaseError(f"{path} is a directory, not a database file")
    if not stat.S_ISREG(info.st_mode):
        raise DatabaseError(f"{path} is not a regular file (a pipe, socket or device); "
                            "a database must be a file")
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise DatabaseError(f"cannot read {path}: {e.strerror}") from None
    if head and head[:16] != HEADER:
        raise DatabaseError(f"{path} is not an SQLite database")
    _check_length(path, head, info.st_size)
    return head


def _check_new(path):
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise DatabaseError(f"cannot create {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise DatabaseError(f"cannot create {path}: directory {parent} is not writable")


def _check_length(path, head, size):
    """Refuse a file shorter than its own header says: SQLite only notices lost
    pages when it reads them, so a truncated database could be written to."""
    if len(head) < 100:
        if head:
            raise DatabaseError(f"{path} is truncated: {size} bytes, shorter than an SQLite header")
        return
    if wal_pending(path):
        return  # a checkpoint in progress writes page 1 first: the file may lag its header
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The header's page count is only valid when these two counters agree.
    if pages and head[24:28] == head[92:96] and size < pages * page_size:
        raise DatabaseError(f"{path} is truncated: {size} bytes, its header "
                            f"says {pages * page_size}")


def wal_pending(path):
    """True while a writer may have changes in the WAL that the main file lacks."""
    wal = f"{path}-wal"
    return os.path.exists(wal) and os.path.getsize(wal) > 0


def connect_ro(path, head=None):
    """A read-only connection that creates no file beside `path`.

    A database left in WAL mode with no -wal file has no writer and nothing
    pending, yet SQLite would create -wal and -shm to read it: it is opened
    immutable instead. With a -wal present (a run is recording), read-only.
    """
    if head is None:
        with open(path, "rb") as f:
            head = f.read(100)
    in_wal = len(head) >= 20 and head[18] == 2 and head[19] == 2
    if in_wal and not os.path.exists(f"{path}-wal"):
        return sqlite3.connect(uri(path, immutable=1), uri=True)
    return sqlite3.connect(uri(path, mode="ro"), uri=True)


def leave(conn):
    """Close a writable connection, leaving one self-contained file: the WAL
    folded in and journal_mode DELETE (skipped, harmlessly, while another
    process still has the database open)."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.OperationalError:
        pass  # another connection holds it: it stays in WAL until the last one leaves
    finally:
        conn.close()


def remove(path):
    """Delete a database this process created and could not finish, with its sidecars."""
    for name in (path, *(path + s for s in SIDECARS)):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
