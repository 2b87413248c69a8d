"""Server-Sent Events, as much of the format as the broker's streams use.

An event is ``id:``, ``event:`` and ``data:`` lines ended by a blank line;
lines that start with ``:`` are comments (the broker's keep-alives). Data
lines of one event are joined with newlines, as the SSE specification says,
then read as JSON. :class:`Parser` reads lines as they come, whoever reads
them; :func:`read` reads one open stream of the sync client with an idle
timeout and an overall end (``observe`` and ``events`` are built on it; the
async client has its own in ``aio/streams.py``).
"""

import json
import socket
import time
from typing import Any, Callable, Iterator, List, NamedTuple, Optional

from .errors import Unreachable

#: The most lines one event may have: a stream that never ends an event is broken.
MAX_EVENT_LINES = 1000

#: The shortest socket timeout of a read (0 would make the socket non-blocking).
MIN_WAIT = 0.01


class Message(NamedTuple):
    """One event of a stream: its ``event:`` name, its JSON ``data`` and its ``id:`` (None without)."""

    event: str
    data: Any
    id: Optional[str] = None


class Parser:
    """Reads a stream line by line, without I/O: :meth:`feed` each line as it arrives (both
    clients read their streams with it).

    Events without data are skipped, as the specification says; an ``id:``
    holds for later events until another.
    """

    def __init__(self) -> None:
        self._name = "message"
        self._data: List[str] = []
        self._lines = 0
        self.last_id: Optional[str] = None

    def feed(self, raw: bytes) -> Optional[Message]:
        """Takes one line (with or without its end); returns the event it completes, if any.

        Raises:
            ValueError: an event of more than :data:`MAX_EVENT_LINES` lines, or data that is not JSON.
        """
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            message = None
            if self._data:
                message = Message(self._name, json.loads("\n".join(self._data)), self.last_id)
            self._name, self._data, self._lines = "message", [], 0
            return message
        self._lines += 1
        if self._lines > MAX_EVENT_LINES:
            raise ValueError(f"an event of more than {MAX_EVENT_LINES} lines: not an event stream")
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self.last_id = value
        return None


def events(readline: Callable[[], Optional[bytes]]) -> Iterator[Message]:
    """Yields a :class:`Message` for each complete event read through ``readline``.

    ``readline`` returns one line with its end, ``b""`` at the end of the
    stream, or None to stop early.
    """
    parser = Parser()
    while True:
        raw = readline()
        if not raw:  # None (stop) or b"" (the stream ended)
            return
        message = parser.feed(raw)
        if message is not None:
            yield message


def read(response: Any, end: Optional[float], idle_timeout: float, what: str) -> Iterator[Message]:
    """The events of an open streaming ``response`` until it ends, or until ``end`` (a
    ``time.monotonic()`` instant; None: never). Closes the response when done.

    Raises:
        Unreachable: nothing arrived for ``idle_timeout`` seconds (the broker
            sends a keep-alive every 15 s), or the stream broke.
    """
    sock = getattr(response, "lockbroker_socket", None)

    def readline() -> Optional[bytes]:
        left = idle_timeout if end is None else min(idle_timeout, end - time.monotonic())
        if left <= 0:
            return None
        if response.isclosed():  # its whole body was read (Python 3.13 closes the socket then)
            return b""
        try:
            if sock is not None:
                sock.settimeout(max(MIN_WAIT, left))
            return response.readline()
        except socket.timeout:
            if end is not None and time.monotonic() >= end:
                return None
            raise Unreachable(None, "unreachable", f"nothing for {idle_timeout} s on {what}") from None
        except OSError as err:
            raise Unreachable(None, "unreachable", f"{what} broke: {err}") from err

    try:
        yield from events(readline)
    finally:
        response.close()
