"""Keeping a lease alive in the async client: one asyncio task per held lease, running the shared
renewal loop (``renewing.py``, by the rules of ``clock.py``)."""

import asyncio
from typing import Awaitable, Callable

from ..clock import LeaseClock
from ..renewing import Renewals
from .running import RUNNER


class AsyncRenewer(Renewals):
    """Renews one lease in a task until :meth:`stop`, or sets ``lost`` (an ``asyncio.Event``).
    Takes the arguments of :class:`~lockbroker.renewing.Renewals`, ``renew`` a coroutine
    function; starts at once (a running event loop is needed)."""

    def __init__(
        self,
        renew: Callable[[float, float], Awaitable[object]],
        clock: LeaseClock,
        lost: asyncio.Event,
        what: str,
    ) -> None:
        super().__init__(renew, clock, lost, what)
        self._task = asyncio.ensure_future(RUNNER.run(self._keep()))

    async def stop(self) -> None:
        """Stops renewing (a renewal in flight is abandoned; its connection closed)."""
        self._stopped = True
        self._task.cancel()
        # `wait`, not `await task`: the task's CancelledError is not ours to
        # raise, and ours (if this task is cancelled meanwhile) still is.
        await asyncio.wait([self._task])
