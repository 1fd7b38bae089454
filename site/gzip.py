"""Gzip for the site's responses: an ASGI middleware (Datasette's asgi_wrapper hook).

A response is compressed when the client accepts gzip, its body arrives in one
message (pages, JSON; streamed CSV passes through untouched), it is text and
larger than a packet. The matrix of a full sweep shrinks about twenty-fold.
"""
import gzip

COMPRESSIBLE = (b"text/", b"application/json", b"application/javascript", b"image/svg")
MINIMUM = 1024


def _accepts_gzip(scope):
    return any(name == b"accept-encoding" and b"gzip" in value
               for name, value in scope.get("headers") or [])


def gzip_app(app):
    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or not _accepts_gzip(scope):
            return await app(scope, receive, send)
        start = None

        async def compressing_send(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message          # held back until the body shows its size
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            head, start = start, None
            headers = list(head.get("headers") or [])
            names = {bytes(k).lower(): bytes(v) for k, v in headers}
            body = message.get("body", b"")
            if (message.get("more_body") or b"content-encoding" in names or len(body) < MINIMUM
                    or not names.get(b"content-type", b"").startswith(COMPRESSIBLE)):
                await send(head)
                return await send(message)
            data = gzip.compress(body, compresslevel=6)
            headers = [(k, v) for k, v in headers if bytes(k).lower() != b"content-length"]
            headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding"),
                        (b"content-length", str(len(data)).encode())]
            await send(dict(head, headers=headers))
            await send({"type": "http.response.body", "body": data})
        await app(scope, receive, compressing_send)
    return wrapped
