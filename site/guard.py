"""The site's traffic limits: an ASGI middleware (Datasette's asgi_wrapper hook).

- Heavy requests, those that run SQL the visitor writes (?sql=, a canned
  query, a table's _where or _search), take one of a few slots: one SQL thread
  fewer than Datasette has, so cheap pages always find a thread. A heavy
  request waits briefly for a slot; when too many already wait it is refused at
  once with 429 and one line. In its slot it gets an Allowance
  (mpsprobe.site.limits): a wall-clock deadline and a budget of fetched bytes.
- Every response, heavy or not, is capped at MAX_ANSWER_BYTES: an answer sent
  in one piece (a page, JSON) that is larger becomes a 400 saying so; a
  streamed one (CSV) stops at the cap, at a line's end, with a last line saying
  it was cut. The database file itself (/name.db) is the way to everything.
"""
import asyncio
import json
import urllib.parse
import weakref

from mpsprobe.site.limits import MAX_ANSWER_BYTES, Allowance, bound, current_allowance, too_large

WAITING_PER_SLOT = 2       # a heavy request beyond these is refused at once
RETRY_AFTER_S = 2
FORMATS = (".json", ".csv", ".blob", ".db")


class ResponseCut(Exception):
    """Raised into the app once its streamed answer reached the cap: it stops producing."""


class Guard:
    def __init__(self, datasette, app, canned_names, max_bytes=MAX_ANSWER_BYTES):
        self.datasette = datasette
        self.app = app
        self.canned_names = canned_names      # database name -> names of its canned queries
        self.max_bytes = max_bytes
        threads = datasette.setting("num_sql_threads") or 1
        self.slots = max(1, threads - 1)
        self.waiting_limit = WAITING_PER_SLOT * self.slots
        self.seconds = datasette.setting("sql_time_limit_ms") / 1000
        # A slot frees within about one time limit: the last in line waits about three.
        self.max_wait = (WAITING_PER_SLOT + 1) * self.seconds + 1
        self._lines = weakref.WeakKeyDictionary()     # event loop -> _Line

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path") or "/"
        capped = send if self.is_download(path) else Capped(send, self.max_bytes, self, scope)
        try:
            if self.is_heavy(path, scope.get("query_string") or b""):
                await self.heavy(scope, receive, capped)
            else:
                await self.app(scope, receive, capped)
        except ResponseCut:
            pass

    async def heavy(self, scope, receive, send):
        line = self._line()
        if line.admitted >= self.slots + self.waiting_limit:
            message = (f"too many queries are running: {self.slots} at a time and {self.waiting_limit} "
                       f"waiting; try again in a few seconds")
            return await self.refuse(scope, send, 429, "Too many queries", message,
                                     [(b"retry-after", str(RETRY_AFTER_S).encode())])
        line.admitted += 1
        try:
            try:
                await asyncio.wait_for(line.slots.acquire(), self.max_wait)
            except asyncio.TimeoutError:
                message = f"no query slot came free within {self.max_wait:g} s; try again in a few seconds"
                return await self.refuse(scope, send, 429, "Too many queries", message,
                                         [(b"retry-after", str(RETRY_AFTER_S).encode())])
            for database in self.datasette.databases.values():
                bound(database)
            token = current_allowance.set(Allowance(self.seconds, self.max_bytes))
            try:
                await self.app(scope, receive, send)
            finally:
                current_allowance.reset(token)
                line.slots.release()
        finally:
            line.admitted -= 1

    def _line(self):
        """The heavy requests' line of the running event loop (an asyncio semaphore
        belongs to one loop; a test may serve from several)."""
        loop = asyncio.get_running_loop()
        if loop not in self._lines:
            self._lines[loop] = _Line(asyncio.Semaphore(self.slots))
        return self._lines[loop]

    def _split(self, path):
        """(database, the path's parts after it, format suffix) for a path under a
        served database; database is None for any other path (/-/..., static files)."""
        from datasette.utils import tilde_decode
        parts = path.strip("/").split("/")
        suffix = next((s for s in FORMATS if parts[-1].endswith(s)), "")
        if suffix:
            parts[-1] = parts[-1][: -len(suffix)]
        parts = [tilde_decode(p) for p in parts]
        if parts[0] not in self.datasette.databases:
            return None, [], suffix
        return parts[0], parts[1:], suffix

    def is_download(self, path):
        database, rest, suffix = self._split(path)
        return database is not None and not rest and suffix == ".db"

    def is_heavy(self, path, query_string):
        database, rest, suffix = self._split(path)
        if database is None or suffix == ".db":
            return False
        params = urllib.parse.parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
        if not rest:       # the database's page runs ?sql=
            return bool(params.get("sql", [""])[0].strip())
        if len(rest) == 1 and rest[0] in self.canned_names(database):
            return True
        return any(p in ("_where", "_search") or p.startswith("_search_") for p in params)

    async def refuse(self, scope, send, status, title, message, headers=()):
        """A one-line error: JSON for .json paths, else the site's error page."""
        if (scope.get("path") or "").endswith(".json"):
            body = json.dumps({"ok": False, "error": message, "status": status, "title": title}).encode()
            content_type = b"application/json; charset=utf-8"
        else:
            from datasette.utils.asgi import Request
            page = await self.datasette.render_template(
                "error.html", {"ok": False, "error": message, "status": status, "title": title},
                request=Request(scope, None))
            body, content_type = page.encode(), b"text/html; charset=utf-8"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type),
                                (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})


class _Line:
    def __init__(self, slots):
        self.slots = slots         # held by the heavy requests running
        self.admitted = 0          # running or waiting


class Capped:
    """An ASGI `send` that lets at most max_bytes of body through (see the module)."""

    def __init__(self, send, max_bytes, guard, scope):
        self.send, self.max_bytes, self.guard, self.scope = send, max_bytes, guard, scope
        self.start = None          # held back until the first body shows whether it streams
        self.sent = 0
        self.ends_line = True      # what was sent so far ends at a line's end
        self.done = False

    async def __call__(self, message):
        if self.done:
            raise ResponseCut()
        kind = message["type"]
        if kind == "http.response.start":
            self.start = message
            return
        if kind != "http.response.body":
            return await self.send(message)
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.start is not None:
            start, self.start = self.start, None
            if not more and len(body) > self.max_bytes:
                self.done = True
                return await self.guard.refuse(self.scope, self.send, 400, "Answer too large",
                                               too_large(self.max_bytes))
            await self.send(start)
        if self.sent + len(body) <= self.max_bytes:
            self.sent += len(body)
            self.ends_line = body.endswith(b"\n") if body else self.ends_line
            return await self.send(message)
        room = body[: self.max_bytes - self.sent]
        room = room[: room.rfind(b"\n") + 1]
        self.done = True
        notice = (f"# cut here: {too_large(self.max_bytes)}\n").encode()
        if not (room or self.ends_line):
            notice = b"\n" + notice
        await self.send({"type": "http.response.body", "body": room + notice, "more_body": False})
        raise ResponseCut()
