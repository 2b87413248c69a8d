"""Keeping a lease alive: one daemon thread per held lease.

The broker judges expiry by the database clock, which this machine cannot
read. What it can know is when it *sent* the request that the broker
answered with a grant or a renewal: the lease was granted no earlier than
that, so it lives at least until that instant plus the TTL. That instant
plus the TTL is the local deadline. The thread renews at a third of the TTL
after each confirmed send, retries a renewal that failed for a transient
reason (503, connection trouble) until the deadline, and declares the lease
lost when:

- the broker refuses the renewal (``lease_lost``, or any other refusal:
  the lease is gone, released by someone with its token, or re-granted), or
- the deadline passes without a confirmed renewal: from then on another
  owner may hold the lock, so the work must not go on as if it were alone.

The deadline errs on the early side (a lease waited for in the queue is
granted after the request was sent), so ``lost`` may be set while the broker
still has the lease, and not later than the deadline (plus scheduling
noise): a renewal in flight is given only until the deadline to answer.
"""

import logging
import random
import threading
import time
from typing import Callable, Optional

from .errors import LockbrokerError, Unavailable

log = logging.getLogger("lockbroker")

#: The shortest read timeout given to one renewal request.
MIN_RENEW_TIMEOUT = 0.05


class Renewer:
    """Renews one lease in a background thread until :meth:`stop`, or sets ``lost``.

    Args:
        renew: sends one renewal (no retries of its own) with the given read
            timeout in seconds; raises ``LockbrokerError`` when it fails.
        ttl: the lease's length in seconds.
        confirmed_at: ``time.monotonic()`` when the request that got the
            lease was sent.
        lost: the event to set when the lease can no longer be kept.
        timeout: the client's timeout, the longest read timeout of a renewal.
        backoff: the first delay between retries of a failed renewal.
        what: names the lease in the log and the thread's name.
    """

    def __init__(
        self,
        renew: Callable[[float], object],
        ttl: float,
        confirmed_at: float,
        lost: threading.Event,
        timeout: float,
        backoff: float,
        what: str,
    ) -> None:
        self._renew = renew
        self._ttl = ttl
        self._confirmed_at = confirmed_at
        self._lost = lost
        self._timeout = timeout
        self._backoff = backoff
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
            self._thread.join(self._timeout + 1.0)

    def _run(self) -> None:
        # Each turn of the outer loop waits a third of the TTL: it runs as
        # long as the lease is held, which is the caller's to bound.
        while not self._stop.is_set():
            due = self._confirmed_at + self._ttl / 3.0
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            if not self._renew_before_deadline():
                return

    def _renew_before_deadline(self) -> bool:
        """One renewal, retried until the deadline; False when the lease is lost or we stopped."""
        deadline = self._confirmed_at + self._ttl
        attempt = 0
        while not self._stop.is_set():
            sent = time.monotonic()
            # Wait for the answer until the deadline; past it (a lease that
            # was waited for longer than its TTL) give the broker a third of
            # the TTL to confirm that the lease still stands.
            remaining = deadline - sent
            read_timeout = remaining if remaining > MIN_RENEW_TIMEOUT else self._ttl / 3.0
            read_timeout = min(self._timeout, max(read_timeout, MIN_RENEW_TIMEOUT))
            try:
                self._renew(read_timeout)
            except Unavailable as err:  # 503 and connection trouble: may pass
                error: LockbrokerError = err
            except LockbrokerError as err:  # the broker refused: the lease is gone
                return self._give_up(err)
            else:
                self._confirmed_at = sent
                self.renewals += 1
                return True
            attempt += 1
            delay = min(self._backoff * (2 ** (attempt - 1)), self._ttl / 6.0)
            delay *= random.uniform(0.5, 1.0)
            if error.retry_after_ms is not None:
                delay = max(delay, error.retry_after_ms / 1000.0)
            if time.monotonic() + delay >= deadline:
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
