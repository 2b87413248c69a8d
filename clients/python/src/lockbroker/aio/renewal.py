"""Keeping a lease alive in the async client: one asyncio task per held lease, following the
rules of ``clock.py`` (as the sync client's thread, ``renewal.py``, does)."""

import asyncio
import logging
import time
from typing import Awaitable, Callable, Optional

from ..clock import LeaseClock
from ..errors import LockbrokerError
from ..retry import transient

log = logging.getLogger("lockbroker")


class AsyncRenewer:
    """Renews one lease in a task until :meth:`stop`, or sets ``lost``.

    Args:
        renew: sends one renewal (no retries of its own) given its read
            timeout in seconds and its deadline (a ``time.monotonic()``
            instant); raises ``LockbrokerError`` when it fails.
        clock: the lease's schedule.
        lost: the event to set when the lease can no longer be kept.
        what: names the lease in the log and the task's name.
    """

    def __init__(
        self,
        renew: Callable[[float, float], Awaitable[object]],
        clock: LeaseClock,
        lost: asyncio.Event,
        what: str,
    ) -> None:
        self._renew = renew
        self.clock = clock
        self._lost = lost
        self._what = what
        self._stopped = False
        self.renewals = 0
        """How many renewals the broker confirmed."""
        self.last_error: Optional[LockbrokerError] = None
        """The failure that made the lease lost, if one did."""
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stops renewing (a renewal in flight is abandoned; its connection closed)."""
        self._stopped = True
        self._task.cancel()
        # `wait`, not `await task`: the task's CancelledError is not ours to
        # raise, and ours (if this task is cancelled meanwhile) still is.
        await asyncio.wait([self._task])

    async def _run(self) -> None:
        clock = self.clock
        while True:
            await asyncio.sleep(max(0.0, clock.next_renewal - time.monotonic()))
            attempt = 0
            while True:
                sent = time.monotonic()
                read_timeout = clock.read_timeout(sent)
                try:
                    await self._renew(read_timeout, sent + read_timeout)
                except LockbrokerError as err:
                    if not transient(err):  # the broker refused: the lease is gone
                        return self._give_up(err)
                    error = err
                else:
                    clock.confirmed(sent)
                    self.renewals += 1
                    break
                attempt += 1
                delay = clock.retry_delay(attempt, error, time.monotonic())
                if delay is None:
                    return self._give_up(error)
                await asyncio.sleep(delay)

    def _give_up(self, error: LockbrokerError) -> None:
        if self._stopped:  # released meanwhile: nothing was lost
            return
        self.last_error = error
        log.warning("lockbroker: lease %s lost: %s", self._what, error)
        self._lost.set()
