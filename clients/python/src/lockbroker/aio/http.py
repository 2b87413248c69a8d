"""HTTP/1.1 over asyncio streams: as much of it as the broker's API needs, in the standard library.

Why not a dependency (httpx, aiohttp): the broker's exchanges are small and
plain (one request per connection with ``Connection: close``, JSON bodies,
``Content-Length`` or chunked answers, Server-Sent Events), so a page of
code does them, and the package stays installable and testable offline with
nothing but Python, like the sync client. What it does not do, and needs
not: keep-alive, pipelining, compression, redirects, proxies, HTTP/2.

:func:`connect` opens a :class:`Connection` (TLS with the client's context
for ``https``); :func:`exchange` writes one request on it and reads the
status line and headers; the body is read from the :class:`Response`, whole
(:meth:`Response.read`) or line by line (:meth:`Response.readline`, for event
streams). A response reads like ``http.client``'s (``status``,
``getheader``), so the shared plans (``exchange.py``) read both alike.
"""

import asyncio
from typing import Dict, List, Optional, Tuple

from ..options import Options

#: The longest status line plus headers read (the broker's are far shorter).
MAX_HEAD = 64 * 1024

#: The longest line of an event stream kept in memory.
MAX_LINE = 1024 * 1024


class BadAnswer(ValueError):
    """What came back is not an HTTP/1.1 answer (the transport counts it as a broken connection)."""


class Connection:
    """An open connection to the broker: one request is written on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        """Closes it (at once: nothing is left to say on it)."""
        self.writer.close()


class Response:
    """An answer whose head was read; its body is read from it, then it is closed."""

    def __init__(self, status: int, headers: Dict[str, str], body: "_Body", writer: asyncio.StreamWriter) -> None:
        self.status = status
        self.headers = headers
        self._body = body
        self._writer = writer

    def getheader(self, name: str) -> Optional[str]:
        """A header's value (names compare without case), None when absent."""
        return self.headers.get(name.lower())

    async def read(self) -> bytes:
        """The whole body."""
        return await self._body.read()

    async def readline(self) -> bytes:
        """The next line of the body with its end, ``b""`` at the end of the body."""
        return await self._body.readline()

    def close(self) -> None:
        """Closes the connection (at once: nothing is left to say on it)."""
        self._writer.close()


async def connect(options: Options) -> Connection:
    """A connection to the broker, TLS if ``options.ssl`` (the handshake done here)."""
    reader, writer = await asyncio.open_connection(
        options.host,
        options.port,
        ssl=options.ssl,
        server_hostname=options.host if options.ssl is not None else None,
        limit=MAX_HEAD,
    )
    return Connection(reader, writer)


def request(method: str, target: str, headers: Dict[str, str], body: Optional[bytes]) -> bytes:
    """One request, encoded: request line, headers (``Content-Length`` added), body."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


async def exchange(connection: Connection, data: bytes) -> Response:
    """Writes the request ``data`` on ``connection`` and reads the answer's head.

    Raises:
        OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError:
            the connection broke.
        BadAnswer: the answer is not HTTP/1.1.
    """
    connection.writer.write(data)
    await connection.writer.drain()
    head = await connection.reader.readuntil(b"\r\n\r\n")
    status, headers = _parse_head(head)
    return Response(status, headers, _Body(connection.reader, headers), connection.writer)


def _parse_head(head: bytes) -> Tuple[int, Dict[str, str]]:
    lines: List[str] = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BadAnswer(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadAnswer(f"not a header: {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(parts[1]), headers


class _Body:
    """Reads a body by its framing: chunked, ``Content-Length``, or up to the end of the connection."""

    def __init__(self, reader: asyncio.StreamReader, headers: Dict[str, str]) -> None:
        self._reader = reader
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if not self._chunked and length is not None and not length.strip().isdigit():
            raise BadAnswer(f"a Content-Length that is not a number: {length[:40]!r}")
        self._left: Optional[int] = None if self._chunked or length is None else int(length)
        self._buffer = b""
        self._done = False

    async def _more(self) -> bytes:
        """The next piece of the body, ``b""`` at its end."""
        if self._done:
            return b""
        if self._chunked:
            size_line = await self._reader.readline()
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadAnswer(f"not a chunk size: {size_line[:40]!r}") from None
            if size == 0:
                while (await self._reader.readline()).strip():  # trailers, up to the blank line
                    pass
                self._done = True
                return b""
            data = await self._reader.readexactly(size)
            await self._reader.readexactly(2)  # the chunk's CRLF
            return data
        if self._left == 0:
            self._done = True
            return b""
        data = await self._reader.read(65536 if self._left is None else min(65536, self._left))
        if not data:
            if self._left is not None:
                raise asyncio.IncompleteReadError(b"", self._left)
            self._done = True
            return b""
        if self._left is not None:
            self._left -= len(data)
        return data

    async def read(self) -> bytes:
        parts = [self._buffer]
        self._buffer = b""
        while True:
            piece = await self._more()
            if not piece:
                return b"".join(parts)
            parts.append(piece)

    async def readline(self) -> bytes:
        while b"\n" not in self._buffer:
            piece = await self._more()
            if not piece:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += piece
            if len(self._buffer) > MAX_LINE:
                raise BadAnswer(f"a line longer than {MAX_LINE} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"
