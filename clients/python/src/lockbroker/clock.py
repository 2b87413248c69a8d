"""When to renew a held lease, how long a renewal may take, and when the lease counts as lost:
the rules, without threads or tasks (the sync client's thread, ``renewal.py``, and the async
client's task, ``aio/renewal.py``, both follow them).

The broker judges expiry by the database clock, which this machine cannot
read. What it can know is when it *sent* the request that the broker
answered with a grant or a renewal: the lease was granted no earlier than
that, so it lives at least until that instant plus the TTL
(:attr:`LeaseClock.held_until`). A renewal is due a third of the TTL after
each confirmed send; one that fails for a transient reason (503, connection
trouble, 429) is retried; the lease is *lost*:

- when the broker refuses a renewal (``lease_lost``, or any other refusal:
  the lease is gone, released by someone with its token, or re-granted), or
- at :attr:`LeaseClock.lost_at`, a tenth of the TTL before ``held_until``,
  when no renewal was confirmed by then: from ``held_until`` on another
  owner may hold the lock, and the margin leaves the holder time to stop.
  A renewal in flight is given only until ``lost_at`` to answer.

This errs on the early side (a lease waited for in the queue is granted
after the request was sent), never on the late one.
"""

import random
from typing import Optional

from .errors import LockbrokerError

#: The shortest read timeout given to one renewal request.
MIN_RENEW_TIMEOUT = 0.05

#: The part of the TTL before ``held_until`` at which an unconfirmed lease is given up.
LOST_MARGIN = 0.1


class LeaseClock:
    """The renewal schedule of one lease (``time.monotonic()`` instants, seconds).

    Args:
        ttl: the lease's length.
        confirmed_at: when the request that got the lease was sent.
        timeout: the client's timeout, the longest read timeout of a renewal.
        backoff: the first delay between retries of a failed renewal.
    """

    def __init__(self, ttl: float, confirmed_at: float, timeout: float, backoff: float) -> None:
        self.ttl = ttl
        self.confirmed_at = confirmed_at
        self.timeout = timeout
        self.backoff = backoff

    @property
    def held_until(self) -> float:
        """Until when the lease is surely held: the last confirmed send plus the TTL."""
        return self.confirmed_at + self.ttl

    @property
    def lost_at(self) -> float:
        """When the lease counts as lost if no renewal was confirmed by then."""
        return self.held_until - self.ttl * LOST_MARGIN

    @property
    def next_renewal(self) -> float:
        """When the next renewal is due: a third of the TTL after the last confirmed send."""
        return self.confirmed_at + self.ttl / 3.0

    def confirmed(self, sent: float) -> None:
        """The broker confirmed the renewal sent at ``sent``."""
        self.confirmed_at = sent

    def read_timeout(self, now: float) -> float:
        """How long a renewal sent at ``now`` may wait for its answer: until :attr:`lost_at`.

        Past it (a lease that was waited for longer than its TTL) the broker
        gets a third of the TTL to confirm that the lease still stands.
        """
        remaining = self.lost_at - now
        limit = remaining if remaining > MIN_RENEW_TIMEOUT else self.ttl / 3.0
        return min(self.timeout, max(limit, MIN_RENEW_TIMEOUT))

    def retry_delay(self, attempt: int, error: LockbrokerError, now: float) -> Optional[float]:
        """The delay before retry ``attempt`` (1, 2, ...) of a renewal that failed transiently
        with ``error``; None when it would end past :attr:`lost_at` (the lease is lost)."""
        delay = min(self.backoff * (2 ** (attempt - 1)), self.ttl / 6.0) * random.uniform(0.5, 1.0)
        if error.retry_after_ms is not None:
            delay = max(delay, error.retry_after_ms / 1000.0)
        if now + delay >= self.lost_at:
            return None
        return delay
