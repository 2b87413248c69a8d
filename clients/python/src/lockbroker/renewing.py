"""Keeping a held lease alive, as a plan (``steps.py``): the renewal loop both clients run, the
sync one in a thread (``renewal.py``), the async one in a task (``aio/renewal.py``).

When each renewal is due, how long it may take and when the lease counts as lost are
``clock.py``'s rules; a failure is transient or final by ``retry.transient``. Stopping is the
front end's: its sleep fails (the thread's stop event) or its task is cancelled, and the plan
ends at that step; a lease stopped meanwhile (released) is not lost.
"""

import logging
import time
from typing import Any, Callable, Optional, Protocol

from .clock import LeaseClock
from .errors import LockbrokerError
from .retry import transient
from .steps import Invoke, Plan, Sleep

log = logging.getLogger("lockbroker")


class Keeping(Protocol):
    """What keeps a held thing alive, as its handle sees it (``heldbase.py``): a lease's own
    :class:`Renewals`, or for a lease held in a session the session's keepalives
    (``sessionbase.InSession``)."""

    clock: LeaseClock
    renewals: int
    last_error: Optional[LockbrokerError]
    stop: Callable[[], Any]


class Renewals:
    """The renewals of one lease: :meth:`_keep` renews it until it is lost, or is stopped.

    Args:
        renew: sends one renewal (no retries of its own) given its read
            timeout in seconds and its deadline (a ``time.monotonic()``
            instant); raises ``LockbrokerError`` when it fails. A function
            in the sync client, a coroutine function in the async one.
        clock: the lease's schedule.
        lost: the event to set when the lease can no longer be kept
            (``threading.Event`` or ``asyncio.Event``).
        what: names the lease in the log.
    """

    #: Stops the renewals: the front end's (a function of the renewal thread, a coroutine function of the task).
    stop: Callable[[], Any]

    def __init__(self, renew: Callable[[float, float], Any], clock: LeaseClock, lost: Any, what: str) -> None:
        self._renew = renew
        self.clock = clock
        self._lost = lost
        self._what = what
        self._stopped = False
        self.renewals = 0
        """How many renewals the broker confirmed (for tests and curiosity)."""
        self.last_error: Optional[LockbrokerError] = None
        """The failure that made the lease lost, if one did."""

    def _keep(self) -> Plan[None]:
        # Each turn waits a third of the TTL: it runs as long as the lease is
        # held, which is the caller's to bound.
        clock = self.clock
        while True:
            yield Sleep(max(0.0, clock.next_renewal - time.monotonic()))
            attempt = 0
            while True:
                sent = time.monotonic()
                read_timeout = clock.read_timeout(sent)
                try:
                    yield Invoke(self._renew, (read_timeout, sent + read_timeout))
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
                if delay is None:  # it would end past `lost_at`
                    return self._give_up(error)
                yield Sleep(delay)

    def _give_up(self, error: LockbrokerError) -> None:
        if self._stopped:  # released meanwhile: nothing was lost
            return
        self.last_error = error
        log.warning("lockbroker: lease %s lost: %s", self._what, error)
        self._lost.set()
