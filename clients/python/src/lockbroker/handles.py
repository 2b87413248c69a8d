"""What a guarded acquire returns: a held lease that renews itself and cleans up.

:class:`Held` is the guard every held thing shares: a renewal thread
(``renewal.py``, by the rules of ``clock.py``), a ``lost`` event, and a
release that runs once, when the ``with`` block ends (also with an
exception) or when called.
:class:`Lease` is a held lease of any kind, bound to its kind
(``kinds.py``) for renewing and releasing it; a kind's handle adds only
what is its own: :class:`Permit` (a semaphore's ``slot``), :class:`RwLease`
(a rwlock's ``mode``), :class:`Leader` (an election's ``name``,
``candidate``, ``term`` and ``resign``). :class:`MultiLease` holds several
locks at once. They are acquired before they are returned, like
``open()``: ``with client.lock(...) as lease`` and
``lease = client.lock(...); ...; lease.release()`` both work.
"""

import logging
import threading
from typing import Any, Callable, Optional, TypeVar

from .clock import LeaseClock
from .errors import LeaseLost, LockbrokerError
from .models import Grant, MultiLockGrant
from .renewal import Renewer

log = logging.getLogger("lockbroker")

H = TypeVar("H", bound="Held")


class Held:
    """Something this process holds: renewed in the background until released.

    Attributes:
        lost: a ``threading.Event``, set when the lease can no longer be
            renewed (the broker says it is gone, or no renewal was confirmed
            before it would end). From then on someone else may hold it: stop
            the work it guards, or at least do not trust the fencing token.
    """

    def __init__(
        self,
        what: str,
        clock: LeaseClock,
        renew: Callable[[float, float], Any],
        release: Callable[[], Any],
    ) -> None:
        self.lost = threading.Event()
        self._what = what
        self._release = release
        self._released = False
        self._guard = threading.Lock()
        self._renewer = Renewer(renew, clock, self.lost, what).start()

    @property
    def held_until(self) -> float:
        """The ``time.monotonic()`` instant until which the lease is surely held: when the request
        of its last confirmed grant or renewal was sent, plus the TTL (``clock.py``)."""
        return self._renewer.clock.held_until

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

    def release(self) -> Any:
        """Stops renewing and releases now (once; later calls return None). Returns the broker's
        answer (:class:`Released` for a lock, permit or rwlock lease).

        A lease already known to be lost (``lost`` set) is still released if
        the broker has it, and returns None if not: its key may be someone
        else's now, and their lease is left alone (the release names this
        lease's token).

        Raises:
            LeaseLost: the lease had ended unnoticed (``lost`` is set now).
            LockbrokerError: the broker could not be asked.
        """
        with self._guard:
            if self._released:
                return None
            self._released = True
        self._renewer.stop()
        try:
            return self._release()
        except LeaseLost:
            if self.lost.is_set():  # known already: nothing of ours to give back
                return None
            self.lost.set()
            raise

    def close(self) -> None:
        """Releases the lease if it is still held; never raises (what a ``with`` block's end does).

        A lease that cannot be released ends by its TTL. A release answered
        ``lease_lost`` sets ``lost``; any failure is logged on the
        ``lockbroker`` logger.
        """
        try:
            self.release()
        except LockbrokerError as err:
            log.warning("lockbroker: releasing %s failed (it ends by its TTL): %s", self._what, err)

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Releases the lease as :meth:`close` does; exceptions of the block pass on."""
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._what}, lost={self.lost.is_set()})"


class Lease(Held):
    """A held lease of one key of any kind (a lock's is exactly this).

    ``key``, ``owner`` and ``token`` (the fencing token: pass it to what the
    lease protects) are the grant's; ``grant`` is the whole answer of the
    acquire (:class:`LockGrant`, :class:`SemaphoreGrant`, ...).
    """

    def __init__(self, kind: Any, grant: Grant, ttl: float, confirmed_at: float) -> None:
        self.grant = grant
        self.key: str = grant.key
        self.owner: str = grant.owner
        self.token: int = grant.token
        ids = kind.spec.lease_ids(grant)
        client = kind.client
        super().__init__(
            kind.spec.describe(grant),
            LeaseClock(ttl, confirmed_at, client.timeout, client.backoff),
            lambda read_timeout, deadline: kind.renew_once(grant.key, ids, ttl, read_timeout, deadline),
            lambda: kind.release_ids(grant.key, ids),
        )


class Permit(Lease):
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""

    @property
    def slot(self) -> int:
        return self.grant.slot


class RwLease(Lease):
    """A held read or write lease of a reader-writer lock (``mode``)."""

    @property
    def mode(self) -> str:
        return self.grant.mode


class Leader(Lease):
    """Leadership of an election ``name``, won by ``candidate``; ``term`` is the fencing token."""

    @property
    def name(self) -> str:
        return self.key

    @property
    def candidate(self) -> str:
        return self.owner

    @property
    def term(self) -> int:
        return self.token

    def resign(self) -> None:
        """Steps down now (once). Raises as :meth:`Held.release`."""
        self.release()


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
            f"multi-lock {self.tokens!r} owner={owner!r}",
            LeaseClock(ttl, confirmed_at, client.timeout, client.backoff),
            lambda read_timeout, deadline: client._renew_multi_once(owner, held, ttl, read_timeout, deadline),
            lambda: client._release_multi_own(owner, held),
        )
