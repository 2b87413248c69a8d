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

What does not wait (the fields, the release's rules) is shared with the
sync handles, in ``heldbase.py``; here are the task and ``async with``.
"""

import asyncio
from typing import Any, Awaitable, Callable, Generator, Generic, List, Optional, Protocol, TypeVar

from ..clock import LeaseClock
from ..heldbase import HeldBase, LeaderFields, LeaseBase, MultiLeaseBase, PermitFields, RwFields
from .renewal import AsyncRenewer
from .running import RUNNER

H = TypeVar("H", bound="AsyncHeld")


class AsyncHeld(HeldBase):
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
        self._begin(what, release, AsyncRenewer(renew, clock, self.lost, what))

    async def release(self) -> Any:
        """Stops renewing and releases now (once; later calls return None), as the sync
        ``Held.release``: a lease already known lost returns None if the broker no longer has it.

        Raises:
            LeaseLost: the lease had ended unnoticed (``lost`` is set now).
            LockbrokerError: the broker could not be asked.
        """
        return await RUNNER.run(self._releasing())

    async def close(self) -> None:
        """Releases the lease if it is still held; never raises a broker error (logged instead,
        on the ``lockbroker`` logger: a lease that cannot be released ends by its TTL)."""
        await RUNNER.run(self._closing())

    async def __aenter__(self: H) -> H:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Releases as :meth:`close` does, shielded: a second cancellation of the task does not
        stop the release (it finishes in the background)."""
        await asyncio.shield(self.close())


class AsyncLease(LeaseBase, AsyncHeld):
    """A held lease of one key of any kind: ``key``, ``owner``, ``token`` (the fencing token),
    ``grant`` (the acquire's whole answer)."""


class AsyncPermit(PermitFields, AsyncLease):
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""


class AsyncRwLease(RwFields, AsyncLease):
    """A held read or write lease of a reader-writer lock (``mode``)."""


class AsyncLeader(LeaderFields, AsyncLease):
    """Leadership of an election ``name``, won by ``candidate``; ``term`` is the fencing token."""

    async def resign(self) -> None:
        """Steps down now (once). Raises as :meth:`AsyncHeld.release`."""
        await self.release()


class AsyncMultiLease(MultiLeaseBase, AsyncHeld):
    """Several locks held together: renewed and released as one; ``tokens`` maps each key to its
    own fencing token."""


class _Exits(Protocol):
    """What an ``async with`` of an :class:`Acquiring` hands over: a held lease, or a session."""

    async def __aexit__(self, *exc: Any) -> None: ...


L = TypeVar("L", bound=_Exits)


class Acquiring(Generic[L]):
    """An acquire not yet made (or a session not yet opened): ``async with`` it, or ``await`` it.

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
