"""HTTP to the broker for the async client: the steps of ``exchange.py``'s plans (shared with the
sync client) awaited over ``aio/http.py``.

What a call is, when it is tried again and what each failure becomes is the shared plan's.
Here: each wait an ``asyncio.wait_for``, and the failures of asyncio streams reported to the
plan as :class:`~lockbroker.steps.Broke`. Cancelling the task that awaits a call closes its
connection at once (the broker then completes or rolls back what it was doing, API.md).
"""

import asyncio
import functools
from typing import Any

from ..exchange import Exchange
from ..options import Options
from ..steps import Connect, Peek, ReadBody, ReadLine, Send, broken_as
from ..wire import Call
from . import http
from .running import AsyncRunner

#: What a connection that broke raises in asyncio (``TimeoutError`` is an ``OSError`` from 3.11 on).
_FAILURES = (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, http.BadAnswer)

#: Reports those failures to the plan as ``Broke`` (a timeout flagged as one).
_broken_as = functools.partial(broken_as, _FAILURES, asyncio.TimeoutError)


class AsyncTransport(AsyncRunner):
    """Sends calls to one broker with one API key (:class:`~lockbroker.options.Options`)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.exchange = Exchange(options)

    async def call(self, call: Call) -> Any:
        """Sends ``call`` (retried as ``exchange.py`` says) and returns its parsed answer.

        Raises:
            LockbrokerError: as the sync ``Transport.call``.
        """
        return await self.run(self.exchange.call(call))

    async def open(self, call: Call) -> http.Response:
        """Sends ``call`` (retried as ``exchange.py`` says) and returns its 2xx response, head read:
        the caller reads its body and closes it."""
        return await self.run(self.exchange.open(call))

    # -- the steps ---------------------------------------------------------------

    async def do_connect(self, step: Connect) -> http.Connection:
        with _broken_as():
            return await asyncio.wait_for(http.connect(self.options), step.timeout)

    async def do_send(self, step: Send) -> http.Response:
        request = http.request(step.method, step.target, step.headers, step.body)
        with _broken_as():
            return await asyncio.wait_for(http.exchange(step.connection, request), step.timeout)

    async def do_read_body(self, step: ReadBody) -> bytes:
        with _broken_as():
            return await asyncio.wait_for(step.response.read(), step.timeout)

    async def do_read_line(self, step: ReadLine) -> bytes:
        with _broken_as():
            return await asyncio.wait_for(step.response.readline(), step.timeout)

    async def do_peek(self, step: Peek) -> bytes:
        with _broken_as():
            return await asyncio.wait_for(step.connection.reader.read(1), step.timeout)
