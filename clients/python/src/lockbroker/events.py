"""``client.events()``: every change of the tenant's locks, semaphores and rwlocks, as it happens.

An :class:`EventStream` connects when it is made (so a change made after
``client.events()`` returned is seen) and yields :class:`Event` values. When
the stream breaks or the broker ends it (a restart, a lost connection, an
idle connection), it connects again with ``Last-Event-ID``: the broker
sends what was missed meanwhile, as long as its history keeps it, else an
``Event`` named ``"reset"`` first.
"""

import time
from typing import Any, Iterator, Optional

from . import specs, sse
from .errors import Unavailable
from .models import Event
from .transport import Transport


class EventStream:
    """An open event stream: iterate it, close it (or use ``with``).

    Attributes:
        last_id: the id of the last event yielded (or the ``after`` it
            started from); a new stream started ``after`` it goes on where
            this one stopped.
        reconnects: how many times it connected again.
    """

    def __init__(
        self,
        http: Transport,
        prefix: str = "",
        after: Optional[int] = None,
        timeout: Optional[float] = None,
        idle_timeout: float = 45.0,
    ) -> None:
        self.last_id = after
        self.reconnects = 0
        self._http = http
        self._prefix = prefix
        self._end = None if timeout is None else time.monotonic() + timeout
        self._idle_timeout = idle_timeout
        self._closed = False
        self._messages: Iterator[sse.Message] = self._connect()

    def _connect(self) -> Iterator[sse.Message]:
        self._response = self._http.open(specs.events(self._prefix, self.last_id, self._http.timeout, self._end))
        return sse.read(self._response, self._end, self._idle_timeout, "the event stream")

    def _over(self) -> bool:
        return self._closed or (self._end is not None and time.monotonic() >= self._end)

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        """The next event; StopIteration once closed or past ``timeout``.

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        broke = 0
        while not self._over():
            try:
                message = next(self._messages)
            except (StopIteration, Unavailable):
                # Ended, broken or idle: connect again where we were, unless
                # that is what the caller's timeout ended. A stream that keeps
                # ending at once is given the transport's backoff.
                if self._over():
                    break
                broke += 1
                if broke > 1:
                    time.sleep(self._http.retry.backoff_delay(broke - 1))
                self.reconnects += 1
                self._response.close()
                self._messages = self._connect()
                continue
            event = Event.from_json(dict(message.data, event=message.event))
            if event.id is not None:
                self.last_id = event.id
            return event
        self.close()
        raise StopIteration

    def close(self) -> None:
        """Closes the connection; iterating ends."""
        self._closed = True
        self._response.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
