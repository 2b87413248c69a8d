"""The async client's event stream, resumed with ``Last-Event-ID`` as the sync ``EventStream`` is:
how it is read and resumed is shared with the sync client (``resuming.py``, over
``sse.Messages``); here it is awaited."""

from typing import Any, Optional

from ..models import Event
from ..resuming import EventFeed
from .transport import AsyncTransport


class AsyncEventStream(EventFeed):
    """Every change of the tenant's locks, semaphores and rwlocks under a prefix, as
    :class:`Event` values: ``async with client.events(prefix) as stream: async for event in
    stream``, or ``stream = await client.events(prefix)``. Connected on entry (or when
    awaited), so a change made after that is seen. ``last_id`` and ``reconnects`` are the sync
    :class:`~lockbroker.EventStream`'s: where it is (a new stream started ``after`` it goes on
    where this one stopped), and how many times it connected again.
    """

    def __init__(
        self,
        http_: AsyncTransport,
        prefix: str = "",
        after: Optional[int] = None,
        timeout: Optional[float] = None,
        idle_timeout: float = 45.0,
    ) -> None:
        super().__init__(http_.exchange, prefix, after, timeout, idle_timeout)
        self._http = http_

    async def connect(self) -> "AsyncEventStream":
        """Opens the stream if it is not open yet.

        Raises:
            TooManyStreams: the tenant has its most streams open on this broker.
            Unavailable: the broker could not be reached (after the client's retries).
        """
        await self._http.run(self._connecting())
        return self

    def __await__(self) -> Any:
        return self.connect().__await__()

    async def __aenter__(self) -> "AsyncEventStream":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        """The next event; StopAsyncIteration once closed or past ``timeout``.

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        event = await self._http.run(self._next())
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Closes the connection; iterating ends."""
        self._close()
