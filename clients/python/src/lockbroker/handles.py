"""What a guarded acquire returns: a held lease that renews itself and cleans up.

:class:`Lease` (a lock), :class:`MultiLease` (several locks at once),
:class:`Permit` (a semaphore slot), :class:`RwLease` (a read or write
lease of a reader-writer lock) and :class:`Leader` (an election won)
share one shape, in :class:`Held`: the
grant, a renewal thread (``renewal.py``), a ``lost`` event, and a release
(or resignation) that runs when the ``with`` block ends, also when it ends
with an exception. They are acquired before they are returned, like
``open()``: ``with client.lock(...) as lease`` and
``lease = client.lock(...); ...; lease.release()`` both work.
"""

import logging
import threading
from typing import Any, Callable, Optional

from .errors import LeaseLost, LockbrokerError
from .models import LockGrant, MultiLockGrant, RwGrant, SemaphoreGrant, Term
from .renewal import Renewer

log = logging.getLogger("lockbroker")


class Held:
    """A lease this process holds: renewed in the background until released.

    Attributes:
        lost: a ``threading.Event``, set when the lease can no longer be
            renewed (the broker says it is gone, or no renewal was confirmed
            before it would end). From then on someone else may hold it: stop
            the work it guards, or at least do not trust the fencing token.
    """

    def __init__(
        self,
        what: str,
        ttl: float,
        confirmed_at: float,
        renew: Callable[[float], Any],
        release: Callable[[], Any],
        timeout: float,
        backoff: float,
    ) -> None:
        self.lost = threading.Event()
        self._release = release
        self._released = False
        self._guard = threading.Lock()
        self._renewer = Renewer(renew, ttl, confirmed_at, self.lost, timeout, backoff, what).start()

    @property
    def renewals(self) -> int:
        """How many renewals the broker has confirmed so far."""
        return self._renewer.renewals

    @property
    def lost_reason(self) -> Optional[LockbrokerError]:
        """The failure that made the lease lost (None while it is held, or when lost on release)."""
        return self._renewer.last_error

    def raise_if_lost(self) -> None:
        """Raises :class:`LeaseLost` if the lease was lost: a check to put between steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(None, "lease_lost", f"the lease was lost: {self.lost_reason}")

    def _end(self) -> Any:
        """Stops renewing, then releases once; later calls do nothing and return None."""
        with self._guard:
            if self._released:
                return None
            self._released = True
        self._renewer.stop()
        try:
            return self._release()
        except LeaseLost:
            self.lost.set()
            raise

    def close(self) -> None:
        """Releases the lease if it is still held; never raises (what a ``with`` block's end does).

        A lease that cannot be released ends by its TTL. A release answered
        ``lease_lost`` sets ``lost``; any failure is logged on the
        ``lockbroker`` logger.
        """
        try:
            self._end()
        except LockbrokerError as err:
            log.warning("lockbroker: releasing %r failed (it ends by its TTL): %s", self, err)

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Releases the lease as :meth:`close` does; exceptions of the block pass on."""
        self.close()


class Lease(Held):
    """A held lock. ``token`` is its fencing token: pass it to what the lock protects."""

    def __init__(self, client: Any, grant: LockGrant, ttl: float, confirmed_at: float) -> None:
        self.key = grant.key
        self.owner = grant.owner
        self.token = grant.token
        self.grant = grant
        key, owner, token = grant.key, grant.owner, grant.token
        super().__init__(
            f"lock {key!r} token {token}",
            ttl,
            confirmed_at,
            lambda read_timeout: client._renew_once("locks", key, {"owner": owner, "token": token}, ttl, read_timeout),
            lambda: client.release(key, owner, token),
            client.timeout,
            client.backoff,
        )

    def release(self):
        """Releases the lock now (once; later calls return None).

        Raises:
            LeaseLost: the lease had already ended (``lost`` is set too).
            LockbrokerError: the broker could not be asked.
        """
        return self._end()

    def __enter__(self) -> "Lease":
        return self

    def __repr__(self) -> str:
        return f"Lease(key={self.key!r}, owner={self.owner!r}, token={self.token}, lost={self.lost.is_set()})"


class Permit(Held):
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""

    def __init__(self, client: Any, grant: SemaphoreGrant, ttl: float, confirmed_at: float) -> None:
        self.key = grant.key
        self.owner = grant.owner
        self.slot = grant.slot
        self.token = grant.token
        self.grant = grant
        key, owner, slot, token = grant.key, grant.owner, grant.slot, grant.token
        super().__init__(
            f"semaphore {key!r} slot {slot} token {token}",
            ttl,
            confirmed_at,
            lambda read_timeout: client._renew_once(
                "semaphores", key, {"owner": owner, "slot": slot, "token": token}, ttl, read_timeout
            ),
            lambda: client.release_permit(key, owner, slot, token),
            client.timeout,
            client.backoff,
        )

    def release(self):
        """Gives the permit back now (once; later calls return None). Raises as :meth:`Lease.release`."""
        return self._end()

    def __enter__(self) -> "Permit":
        return self

    def __repr__(self) -> str:
        return (
            f"Permit(key={self.key!r}, owner={self.owner!r}, slot={self.slot}, "
            f"token={self.token}, lost={self.lost.is_set()})"
        )


class RwLease(Held):
    """A held read or write lease of a reader-writer lock (``mode``); ``token`` is its fencing token."""

    def __init__(self, client: Any, grant: RwGrant, ttl: float, confirmed_at: float) -> None:
        self.key = grant.key
        self.owner = grant.owner
        self.mode = grant.mode
        self.token = grant.token
        self.grant = grant
        key, owner, token = grant.key, grant.owner, grant.token
        super().__init__(
            f"rwlock {key!r} {grant.mode} token {token}",
            ttl,
            confirmed_at,
            lambda read_timeout: client._renew_once(
                "rwlocks", key, {"owner": owner, "token": token}, ttl, read_timeout
            ),
            lambda: client.release_rw(key, owner, token),
            client.timeout,
            client.backoff,
        )

    def release(self):
        """Ends the lease now (once; later calls return None). Raises as :meth:`Lease.release`."""
        return self._end()

    def __enter__(self) -> "RwLease":
        return self

    def __repr__(self) -> str:
        return (
            f"RwLease(key={self.key!r}, owner={self.owner!r}, mode={self.mode!r}, "
            f"token={self.token}, lost={self.lost.is_set()})"
        )


class Leader(Held):
    """Leadership of an election, won by ``candidate``; ``term`` is the fencing token."""

    def __init__(self, client: Any, grant: Term, ttl: float, confirmed_at: float, candidate: str) -> None:
        self.name = grant.name
        self.candidate = candidate
        self.term = grant.term
        self.grant = grant
        name, term = grant.name, grant.term
        super().__init__(
            f"election {name!r} term {term}",
            ttl,
            confirmed_at,
            lambda read_timeout: client._renew_once(
                "elections", name, {"candidate": candidate, "term": term}, ttl, read_timeout
            ),
            lambda: client.resign(name, candidate, term),
            client.timeout,
            client.backoff,
        )

    def resign(self) -> None:
        """Steps down now (once). Raises as :meth:`Lease.release`."""
        self._end()

    def __enter__(self) -> "Leader":
        return self

    def __repr__(self) -> str:
        return f"Leader(name={self.name!r}, candidate={self.candidate!r}, term={self.term}, lost={self.lost.is_set()})"


class MultiLease(Held):
    """Several locks held together (a multi-lock): renewed and released as one.

    ``tokens`` maps each key (as named) to its own fencing token; pass each
    to what that key protects.
    """

    def __init__(self, client: Any, grant: MultiLockGrant, ttl: float, confirmed_at: float) -> None:
        self.owner = grant.owner
        self.keys = [entry.key for entry in grant.locks]
        self.tokens = {entry.key: entry.token for entry in grant.locks}
        self.grant = grant
        owner, held = grant.owner, [{"key": e.key, "token": e.token} for e in grant.locks]
        super().__init__(
            f"multi-lock {self.keys!r}",
            ttl,
            confirmed_at,
            lambda read_timeout: client._renew_multi_once(owner, held, ttl, read_timeout),
            lambda: client.release_multi(owner, held),
            client.timeout,
            client.backoff,
        )

    def release(self):
        """Releases every key now (once; later calls return None). Raises as :meth:`Lease.release`."""
        return self._end()

    def __enter__(self) -> "MultiLease":
        return self

    def __repr__(self) -> str:
        return f"MultiLease(owner={self.owner!r}, tokens={self.tokens!r}, lost={self.lost.is_set()})"
