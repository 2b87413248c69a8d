"""What an async guard gives: a held lease that renews itself in a task and is released when
its ``async with`` block ends, also when the enclosing task is cancelled.

:class:`Acquiring` is what ``client.lock(...)`` returns: ``async with`` it
(acquired on entry, released on exit) or ``await`` it (the lease, released
by ``await lease.release()`` or its own ``async with``). :class:`AsyncHeld`
is the held thing every kind shares (a renewal task, a ``lost``
``asyncio.Event``, a release that runs once); a kind's handle adds only
its own: :class:`AsyncPermit` (``slot``), :class:`AsyncRwLease`
(``mode``), :class:`AsyncLeader` (``name``, ``candidate``, ``term``,
``resign``). :class:`AsyncMultiLease` holds several locks at once.
"""

import asyncio
import logging
from typing import Any, Awaitable, Callable, Dict, Generator, Generic, List, Optional, TypeVar

from ..clock import LeaseClock
from ..errors import LeaseLost, LockbrokerError
from ..models import Grant, MultiLockGrant
from .renewal import AsyncRenewer

log = logging.getLogger("lockbroker")

H = TypeVar("H", bound="AsyncHeld")


class AsyncHeld:
    """Something this task holds: renewed in the background until released.

    Attributes:
        lost: an ``asyncio.Event``, set when the lease can no longer be
            renewed (the broker says it is gone, or no renewal was confirmed
            before it would end). From then on someone else may hold it.
    """

    def __init__(
        self,
        what: str,
        clock: LeaseClock,
        renew: Callable[[float, float], Awaitable[Any]],
        release: Callable[[], Awaitable[Any]],
    ) -> None:
        self.lost = asyncio.Event()
        self._what = what
        self._release = release
        self._released = False
        self._renewer = AsyncRenewer(renew, clock, self.lost, what)

    @property
    def renewals(self) -> int:
        """How many renewals the broker has confirmed so far."""
        return self._renewer.renewals

    @property
    def held_until(self) -> float:
        """The ``time.monotonic()`` instant until which the lease is surely held (``clock.py``)."""
        return self._renewer.clock.held_until

    @property
    def lost_reason(self) -> Optional[LockbrokerError]:
        """The failure that made the lease lost (None while it is held)."""
        return self._renewer.last_error

    def raise_if_lost(self) -> None:
        """Raises :class:`LeaseLost` if the lease was lost: a check to put between steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(None, "lease_lost", f"the lease was lost: {self.lost_reason}")

    async def release(self) -> Any:
        """Stops renewing and releases now (once; later calls return None), as the sync
        ``Held.release``: a lease already known lost returns None if the broker no longer has it.

        Raises:
            LeaseLost: the lease had ended unnoticed (``lost`` is set now).
            LockbrokerError: the broker could not be asked.
        """
        if self._released:
            return None
        self._released = True
        await self._renewer.stop()
        try:
            return await self._release()
        except LeaseLost:
            if self.lost.is_set():
                return None
            self.lost.set()
            raise

    async def close(self) -> None:
        """Releases the lease if it is still held; never raises a broker error (logged instead,
        on the ``lockbroker`` logger: a lease that cannot be released ends by its TTL)."""
        try:
            await self.release()
        except LockbrokerError as err:
            log.warning("lockbroker: releasing %s failed (it ends by its TTL): %s", self._what, err)

    async def __aenter__(self: H) -> H:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Releases as :meth:`close` does, shielded: a second cancellation of the task does not
        stop the release (it finishes in the background)."""
        await asyncio.shield(self.close())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._what}, lost={self.lost.is_set()})"


class AsyncLease(AsyncHeld):
    """A held lease of one key of any kind: ``key``, ``owner``, ``token`` (the fencing token),
    ``grant`` (the acquire's whole answer)."""

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


class AsyncPermit(AsyncLease):
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""

    @property
    def slot(self) -> int:
        return self.grant.slot


class AsyncRwLease(AsyncLease):
    """A held read or write lease of a reader-writer lock (``mode``)."""

    @property
    def mode(self) -> str:
        return self.grant.mode


class AsyncLeader(AsyncLease):
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

    async def resign(self) -> None:
        """Steps down now (once). Raises as :meth:`AsyncHeld.release`."""
        await self.release()


class AsyncMultiLease(AsyncHeld):
    """Several locks held together: renewed and released as one; ``tokens`` maps each key to its
    own fencing token."""

    def __init__(self, client: Any, grant: MultiLockGrant, ttl: float, confirmed_at: float) -> None:
        self.owner = grant.owner
        self.keys = [entry.key for entry in grant.locks]
        self.tokens: Dict[str, int] = {entry.key: entry.token for entry in grant.locks}
        self.grant = grant
        owner, held = grant.owner, [{"key": e.key, "token": e.token} for e in grant.locks]
        super().__init__(
            f"multi-lock {self.tokens!r} owner={owner!r}",
            LeaseClock(ttl, confirmed_at, client.timeout, client.backoff),
            lambda read_timeout, deadline: client._renew_multi_once(owner, held, ttl, read_timeout, deadline),
            lambda: client._release_multi_own(owner, held),
        )


L = TypeVar("L", bound=AsyncHeld)


class Acquiring(Generic[L]):
    """An acquire not yet made: ``async with`` it, or ``await`` it.

    ``async with client.lock("k") as lease:`` acquires on entry and releases
    on exit (normal, exception, or the task cancelled);
    ``lease = await client.lock("k")`` acquires and hands the lease over
    (release it with ``await lease.release()``, or ``async with lease:``).
    """

    def __init__(self, acquire: Callable[[], Awaitable[L]]) -> None:
        self._acquire = acquire
        self._lease: Optional[L] = None

    def __await__(self) -> Generator[Any, None, L]:
        return self._acquire().__await__()

    async def __aenter__(self) -> L:
        self._lease = await self._acquire()
        return self._lease

    async def __aexit__(self, *exc: Any) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(*exc)


__all__: List[str] = [
    "Acquiring",
    "AsyncHeld",
    "AsyncLease",
    "AsyncLeader",
    "AsyncMultiLease",
    "AsyncPermit",
    "AsyncRwLease",
]
