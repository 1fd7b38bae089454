"""Resource limits on the SQL anyone can send to the site (?sql=, canned queries).

Datasette's time limit interrupts a query between steps, but one step can take
a minute: `randomblob(1000000000)` or `printf('%.*c', 2000000000, 'x')`. So
every connection gets SQLite's length limit (a string or blob past it fails at
once with "string or blob too big"), and printf/format refuse a width or
precision that could only build such a string, before building anything
(SQLite 3.40's printf pads one character at a time, past any length limit).
"""
import re
import sqlite3
import threading

MAX_LENGTH = 20_000_000        # bytes in one string or blob
MAX_WIDTH = 100_000            # a printf width or precision
_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")
_helper = threading.local()


def _builtin():
    """A private in-memory connection whose own printf does the formatting."""
    conn = getattr(_helper, "conn", None)
    if conn is None:
        conn = _helper.conn = sqlite3.connect(":memory:")
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
    return conn


def checked_printf(fmt, *args):
    if fmt is None:
        return None
    stars = iter(args)
    for width, precision in _SPEC.findall(str(fmt)):
        for part in (width, precision):
            value = next(stars, 0) if part == "*" else part
            try:
                too_big = abs(int(value or 0)) > MAX_WIDTH
            except (TypeError, ValueError):
                too_big = False
            if too_big:
                raise ValueError(f"printf width or precision above {MAX_WIDTH:,}")
        # A spec's own argument follows its * arguments.
        next(stars, None)
    placeholders = ", ".join("?" for _ in args)
    return _builtin().execute(f"SELECT printf(?{', ' if args else ''}{placeholders})",
                              [fmt, *args]).fetchone()[0]


def limit(conn):
    """Apply the limits to one connection (Datasette's prepare_connection hook)."""
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
    for name in ("printf", "format"):
        conn.create_function(name, -1, checked_printf)
