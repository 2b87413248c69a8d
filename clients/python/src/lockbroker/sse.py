"""Server-Sent Events, as much of the format as the broker's ``observe`` uses.

An event is ``event:`` and ``data:`` lines ended by a blank line; lines that
start with ``:`` are comments (the broker's keep-alives). Data lines of one
event are joined with newlines, as the SSE specification says, then read as
JSON.
"""

import json
from typing import Any, Callable, Iterator, List, Optional, Tuple

#: The most lines one event may have: a stream that never ends an event is broken.
MAX_EVENT_LINES = 1000


def events(readline: Callable[[], Optional[bytes]]) -> Iterator[Tuple[str, Any]]:
    """Yields ``(event, data)`` for each complete event read through ``readline``.

    ``readline`` returns one line with its end, ``b""`` at the end of the
    stream, or None to stop early. Events without data are skipped, as
    the specification says.
    """
    name: str = "message"
    data: List[str] = []
    lines = 0
    while True:
        raw = readline()
        if not raw:  # None (stop) or b"" (the stream ended)
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
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
