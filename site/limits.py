"""Resource limits on the SQL anyone can send to the site (?sql=, canned queries).

Datasette's time limit is a progress handler that looks at the clock every
1,000 SQLite instructions, so a query whose rows each cost one long function
call runs far past it: `length(hex(randomblob(9999999)))` over 200 rows took
8.8 s against a 2 s limit. Three limits close that:

- Length: no string or blob over MAX_LENGTH bytes (SQLITE_LIMIT_LENGTH; past it
  a function fails at once with "string or blob too big"), and printf/format
  refuse a width or precision that could only build such a string (SQLite's
  printf pads one character at a time, past any length limit). The largest
  value stored is a few KB (an FTS index block 4 KB, a view's SQL 4.3 KB,
  messages cut at 500 characters; a run's options with every op named would
  be ~15 KB), and a value over the limit cannot even be read. The cap is also
  what bounds one function call, and some builtins are quadratic in their
  arguments: instr() and replace() over 2 MB strings take 70-90 s in one call,
  over 100 KB ones 0.2 s, over 50 KB ones 0.03 s.
- Wall clock: a heavy request (see mpsprobe.site.guard) gets an Allowance; a
  watchdog thread interrupts its connection (sqlite3_interrupt, which SQLite
  checks at every row, not every 1,000 instructions) once the request's
  deadline passes, whatever the statement is doing.
- Bytes: the rows a heavy request fetches are counted as they arrive; past
  MAX_ANSWER_BYTES the query fails with a one-line "answer too large", so the
  server holds little more than that for one request (the responses
  themselves are capped by the guard).
"""
import asyncio
import contextvars
import re
import sqlite3
import threading
import time

MAX_LENGTH = 50_000            # bytes in one string or blob
MAX_WIDTH = MAX_LENGTH         # a printf width or precision
MAX_ANSWER_BYTES = 10_000_000  # rows one heavy request may fetch; bytes in one response
REPEAT_INTERRUPT_S = 0.01      # a statement started after an interrupt clears it: interrupt again
_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")
_helper = threading.local()

# The Allowance of the heavy request being served, set by the guard; None for other requests.
current_allowance = contextvars.ContextVar("mpsprobe_allowance", default=None)


def too_large(max_bytes):
    return (f"answer too large: over {max_bytes:,} bytes, the site's limit for one answer; "
            f"ask for fewer rows or columns, or download the database")


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


class Allowance:
    """What one heavy request may still spend: wall-clock time from its start and
    bytes of fetched rows. Its statements run one at a time (`one_at_a_time`), so
    a request never holds more than one of the SQL threads."""

    def __init__(self, seconds, max_bytes=MAX_ANSWER_BYTES):
        self.deadline = time.monotonic() + seconds
        self.max_bytes = max_bytes
        self.bytes_left = max_bytes
        self.one_at_a_time = asyncio.Lock()
        self._interrupting = threading.Lock()

    def run(self, conn, fn):
        """fn(conn), in the SQL thread: interrupted at the deadline, its rows counted."""
        finished = threading.Event()
        watchdog = threading.Thread(target=self._interrupt_at_deadline, args=(conn, finished),
                                    name="mpsprobe-deadline", daemon=True)
        make_row = conn.row_factory
        conn.row_factory = self._counting(make_row)
        watchdog.start()
        try:
            return fn(conn)
        finally:
            with self._interrupting:   # no interrupt lands after fn is done
                finished.set()
            conn.row_factory = make_row

    def _interrupt_at_deadline(self, conn, finished):
        wait = self.deadline - time.monotonic()
        while not finished.wait(max(wait, 0)):
            with self._interrupting:
                if finished.is_set():
                    return
                conn.interrupt()
            wait = REPEAT_INTERRUPT_S

    def _counting(self, make_row):
        def row(cursor, values):
            self.bytes_left -= sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in values)
            if self.bytes_left < 0:
                raise sqlite3.OperationalError(too_large(self.max_bytes))
            return make_row(cursor, values) if make_row else values
        return row


def bound(database):
    """Route a Datasette database's queries through the current heavy request's
    Allowance. Datasette 0.65 has no hook around a query's execution; every
    query of a database goes through its `execute_fn`, so that is wrapped."""
    execute_fn = database.execute_fn
    if getattr(execute_fn, "mpsprobe_bound", False):
        return

    async def bounded(fn):
        allowance = current_allowance.get()
        if allowance is None:
            return await execute_fn(fn)
        async with allowance.one_at_a_time:
            return await execute_fn(lambda conn: allowance.run(conn, fn))
    bounded.mpsprobe_bound = True
    database.execute_fn = bounded
