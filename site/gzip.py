"""Gzip for the site's responses: an ASGI middleware (Datasette's asgi_wrapper hook).

A response is compressed when the client accepts gzip, it is text, and it is
larger than a packet or streamed (Datasette streams CSV exports in chunks: each
is compressed as it passes, so a full table's CSV is never held whole). The
matrix of a full sweep shrinks about twenty-fold.
"""
import gzip
import zlib

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
        stream = None    # a zlib compressor while a streamed body passes through

        async def compressing_send(message):
            nonlocal start, stream
            if stream is not None and message["type"] == "http.response.body":
                data = stream.compress(message.get("body", b""))
                if not message.get("more_body"):
                    data += stream.flush()
                elif data:
                    data += stream.flush(zlib.Z_SYNC_FLUSH)   # each chunk reaches the client as it comes
                return await send(dict(message, body=data))
            if message["type"] == "http.response.start":
                start = message          # held back until the body shows its size
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            head, start = start, None
            headers = list(head.get("headers") or [])
            names = {bytes(k).lower(): bytes(v) for k, v in headers}
            body = message.get("body", b"")
            streamed = bool(message.get("more_body"))
            if (b"content-encoding" in names or (len(body) < MINIMUM and not streamed)
                    or not names.get(b"content-type", b"").startswith(COMPRESSIBLE)):
                await send(head)
                return await send(message)
            headers = [(k, v) for k, v in headers if bytes(k).lower() != b"content-length"]
            headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
            if streamed:
                stream = zlib.compressobj(6, zlib.DEFLATED, 31)   # wbits 31: the gzip container
                await send(dict(head, headers=headers))
                return await compressing_send(message)
            data = gzip.compress(body, compresslevel=6)
            headers.append((b"content-length", str(len(data)).encode()))
            await send(dict(head, headers=headers))
            await send({"type": "http.response.body", "body": data})
        await app(scope, receive, compressing_send)
    return wrapped
