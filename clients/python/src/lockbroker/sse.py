"""Server-Sent Events, as much of the format as the broker's streams use.

An event is ``id:``, ``event:`` and ``data:`` lines ended by a blank line;
lines that start with ``:`` are comments (the broker's keep-alives). Data
lines of one event are joined with newlines, as the SSE specification says,
then read as JSON. :func:`read` reads one open stream with an idle timeout
and an overall end; ``observe`` and ``events`` are both built on it.
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


def events(readline: Callable[[], Optional[bytes]]) -> Iterator[Message]:
    """Yields a :class:`Message` for each complete event read through ``readline``.

    ``readline`` returns one line with its end, ``b""`` at the end of the
    stream, or None to stop early. Events without data are skipped, as
    the specification says; an ``id:`` holds for later events until another.
    """
    name: str = "message"
    data: List[str] = []
    last_id: Optional[str] = None
    lines = 0
    while True:
        raw = readline()
        if not raw:  # None (stop) or b"" (the stream ended)
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                yield Message(name, json.loads("\n".join(data)), last_id)
            name, data, lines = "message", [], 0
            continue
        lines += 1
        if lines > MAX_EVENT_LINES:
            raise ValueError(f"an event of more than {MAX_EVENT_LINES} lines: not an event stream")
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id" and "\0" not in value:
            last_id = value


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
        if sock is not None:
            sock.settimeout(max(MIN_WAIT, left))
        try:
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
