"""The async client's streams: Server-Sent Events read from a response (with ``sse.Parser``,
shared with the sync client), and the event stream, resumed with ``Last-Event-ID`` as the sync
``EventStream`` is."""

import asyncio
import time
from typing import Any, AsyncIterator, Optional

from .. import specs, sse
from ..errors import Unavailable, Unreachable
from ..models import Event
from . import http
from .transport import AsyncTransport


async def messages(
    response: http.Response, end: Optional[float], idle_timeout: float, what: str
) -> AsyncIterator[sse.Message]:
    """The events of an open streaming ``response`` until it ends, or until ``end`` (a
    ``time.monotonic()`` instant; None: never). Closes the response when done.

    Raises:
        Unreachable: nothing arrived for ``idle_timeout`` seconds (the broker
            sends a keep-alive every 15 s), or the stream broke.
    """
    parser = sse.Parser()
    try:
        while True:
            left = idle_timeout if end is None else min(idle_timeout, end - time.monotonic())
            if left <= 0:
                return
            try:
                line = await asyncio.wait_for(response.readline(), max(sse.MIN_WAIT, left))
            except asyncio.TimeoutError:
                if end is not None and time.monotonic() >= end:
                    return
                raise Unreachable(None, "unreachable", f"nothing for {idle_timeout} s on {what}") from None
            except (OSError, asyncio.IncompleteReadError, http.BadAnswer) as err:
                raise Unreachable(None, "unreachable", f"{what} broke: {err!r}") from err
            if not line:
                return
            message = parser.feed(line)
            if message is not None:
                yield message
    finally:
        response.close()


class AsyncEventStream:
    """Every change of the tenant's locks, semaphores and rwlocks under a prefix, as
    :class:`Event` values: ``async with client.events(prefix) as stream: async for event in
    stream``, or ``stream = await client.events(prefix)``. Connected on entry (or when
    awaited), so a change made after that is seen.

    Attributes:
        last_id: the id of the last event yielded (or the ``after`` it
            started from); a new stream started ``after`` it goes on where
            this one stopped.
        reconnects: how many times it connected again.
    """

    def __init__(
        self,
        http_: AsyncTransport,
        prefix: str = "",
        after: Optional[int] = None,
        timeout: Optional[float] = None,
        idle_timeout: float = 45.0,
    ) -> None:
        self.last_id = after
        self.reconnects = 0
        self._http = http_
        self._prefix = prefix
        self._end = None if timeout is None else time.monotonic() + timeout
        self._idle_timeout = idle_timeout
        self._closed = False
        self._messages: Optional[AsyncIterator[sse.Message]] = None

    async def connect(self) -> "AsyncEventStream":
        """Opens the stream if it is not open yet.

        Raises:
            TooManyStreams: the tenant has its most streams open on this broker.
            Unavailable: the broker could not be reached (after the client's retries).
        """
        if self._messages is None:
            response = await self._http.open(specs.events(self._prefix, self.last_id, self._http.timeout, self._end))
            self._messages = messages(response, self._end, self._idle_timeout, "the event stream")
        return self

    def __await__(self) -> Any:
        return self.connect().__await__()

    async def __aenter__(self) -> "AsyncEventStream":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def _over(self) -> bool:
        return self._closed or (self._end is not None and time.monotonic() >= self._end)

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        """The next event; StopAsyncIteration once closed or past ``timeout``.

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        broke = 0
        while not self._over():
            try:
                await self.connect()
            except Unavailable:
                if self._over():  # the deadline of `timeout` passed meanwhile
                    break
                raise
            assert self._messages is not None
            try:
                message = await self._messages.__anext__()
            except (StopAsyncIteration, Unavailable):
                # Ended, broken or idle: connect again where we were (unless
                # the timeout ended it); a stream that keeps ending at once is
                # given the client's backoff.
                if self._over():
                    break
                broke += 1
                if broke > 1:
                    await asyncio.sleep(self._http.retry.backoff_delay(broke - 1))
                self.reconnects += 1
                await self._drop()
                continue
            event = Event.from_json(dict(message.data, event=message.event))
            if event.id is not None:
                self.last_id = event.id
            return event
        await self.aclose()
        raise StopAsyncIteration

    async def _drop(self) -> None:
        if self._messages is not None:
            messages_, self._messages = self._messages, None
            await messages_.aclose()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        """Closes the connection; iterating ends."""
        self._closed = True
        await self._drop()
