"""Keeping a lease alive in the sync client: one daemon thread per held lease, following the
rules of ``clock.py`` (when to renew, for how long, when the lease is lost)."""

import logging
import threading
import time
from typing import Callable, Optional

from .clock import LeaseClock
from .errors import LockbrokerError
from .retry import transient

log = logging.getLogger("lockbroker")


class Renewer:
    """Renews one lease in a background thread until :meth:`stop`, or sets ``lost``.

    Args:
        renew: sends one renewal (no retries of its own) given its read
            timeout in seconds and its deadline (a ``time.monotonic()``
            instant); raises ``LockbrokerError`` when it fails.
        clock: the lease's schedule.
        lost: the event to set when the lease can no longer be kept.
        what: names the lease in the log and the thread's name.
    """

    def __init__(
        self,
        renew: Callable[[float, float], object],
        clock: LeaseClock,
        lost: threading.Event,
        what: str,
    ) -> None:
        self._renew = renew
        self.clock = clock
        self._lost = lost
        self._what = what
        self._stop = threading.Event()
        self.renewals = 0
        """How many renewals the broker confirmed (for tests and curiosity)."""
        self.last_error: Optional[LockbrokerError] = None
        """The failure that made the lease lost, if one did."""
        self._thread = threading.Thread(target=self._run, name=f"lockbroker-renew {what}", daemon=True)

    def start(self) -> "Renewer":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops renewing and waits for a renewal in flight to end (bounded by its read timeout)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.clock.timeout + 1.0)

    def _run(self) -> None:
        # Each turn waits a third of the TTL: it runs as long as the lease
        # is held, which is the caller's to bound.
        while not self._stop.is_set():
            if self._stop.wait(max(0.0, self.clock.next_renewal - time.monotonic())):
                return
            if not self._renew_in_time():
                return

    def _renew_in_time(self) -> bool:
        """One renewal, retried until the lease would be lost; False when it is, or we stopped."""
        attempt = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            read_timeout = self.clock.read_timeout(sent)
            try:
                self._renew(read_timeout, sent + read_timeout)
            except LockbrokerError as err:
                if not transient(err):  # the broker refused: the lease is gone
                    return self._give_up(err)
                error = err
            else:
                self.clock.confirmed(sent)
                self.renewals += 1
                return True
            attempt += 1
            delay = self.clock.retry_delay(attempt, error, time.monotonic())
            if delay is None:
                return self._give_up(error)
            if self._stop.wait(delay):
                return False
        return False

    def _give_up(self, error: LockbrokerError) -> bool:
        if self._stop.is_set():  # released meanwhile: nothing was lost
            return False
        self.last_error = error
        log.warning("lockbroker: lease %s lost: %s", self._what, error)
        self._lost.set()
        return False
