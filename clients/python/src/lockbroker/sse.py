"""Server-Sent Events, as much of the format as the broker's streams use.

An event is ``id:``, ``event:`` and ``data:`` lines ended by a blank line;
lines that start with ``:`` are comments (the broker's keep-alives). Data
lines of one event are joined with newlines, as the SSE specification says,
then read as JSON. :class:`Parser` reads lines as they come, whoever reads
them; :class:`Messages` reads the events of one open stream as a plan
(``steps.py``), with an idle timeout and an overall end, for both clients
(``observe`` and ``events`` are built on it, in ``resuming.py``).
"""

import json
import time
from typing import Any, List, NamedTuple, Optional

from .errors import Unreachable
from .steps import Broke, Plan, ReadLine

#: The most lines one event may have: a stream that never ends an event is broken.
MAX_EVENT_LINES = 1000

#: The shortest wait for a line (a socket timeout of 0 would make the socket non-blocking).
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


class Messages:
    """The events of one open streaming ``response``, read as plans (``steps.py``) by both
    clients, until it ends or until ``end`` (a ``time.monotonic()`` instant; None: never).

    Each :meth:`next` waits at most ``idle_timeout`` seconds for a line (the
    broker sends a keep-alive comment every 15 s), and never past ``end``.
    """

    def __init__(self, response: Any, end: Optional[float], idle_timeout: float, what: str) -> None:
        self.response = response
        self._end = end
        self._idle_timeout = idle_timeout
        self._what = what
        self._parser = Parser()

    def next(self) -> Plan[Optional[Message]]:
        """The next event; None when the stream ended, or ``end`` came.

        Raises:
            Unreachable: nothing arrived for ``idle_timeout`` seconds, or the stream broke.
            ValueError: what arrived is not an event stream (see :meth:`Parser.feed`).
        """
        while True:
            left = self._idle_timeout if self._end is None else min(self._idle_timeout, self._end - time.monotonic())
            if left <= 0:
                return None
            try:
                line = yield ReadLine(self.response, max(MIN_WAIT, left))
            except Broke as broke:
                if not broke.timed_out:
                    raise Unreachable(None, "unreachable", f"{self._what} broke: {broke.detail}") from broke.error
                if self._end is not None and time.monotonic() >= self._end:
                    return None
                raise Unreachable(None, "unreachable", f"nothing for {self._idle_timeout} s on {self._what}") from None
            if not line:
                return None
            message = self._parser.feed(line)
            if message is not None:
                return message

    def close(self) -> None:
        """Closes the response (at once)."""
        self.response.close()
