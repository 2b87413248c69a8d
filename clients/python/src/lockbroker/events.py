"""``client.events()``: every change of the tenant's locks, semaphores and rwlocks, as it happens.

An :class:`EventStream` connects when it is made (so a change made after
``client.events()`` returned is seen) and yields :class:`Event` values. When
the stream breaks or the broker ends it (a restart, a lost connection, an
idle connection), it connects again with ``Last-Event-ID``: the broker
sends what was missed meanwhile, as long as its history keeps it, else an
``Event`` named ``"reset"`` first. How it is read and resumed is shared
with the async client (``resuming.py``); here it is iterated, blocking.
"""

from typing import Any, Optional

from .models import Event
from .resuming import EventFeed
from .transport import Transport


class EventStream(EventFeed):
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
        super().__init__(http.exchange, prefix, after, timeout, idle_timeout)
        self._http = http
        http.run(self._connecting())

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        """The next event; StopIteration once closed or past ``timeout``.

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        event = self._http.run(self._next())
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        """Closes the connection; iterating ends."""
        self._close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
