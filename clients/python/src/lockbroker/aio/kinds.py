"""The async client's kinds: ``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, the sync kinds' calls (``kinds.py``) as coroutines, sending the same
:class:`~lockbroker.specs.Spec` calls.

``hold`` returns an :class:`~lockbroker.aio.handles.Acquiring`; ``list``
and ``observe`` are async iterators. An acquire of a guard cancelled (its
task cancelled, a ``wait_for`` timing out) after it was sent leaves no lease
behind: the guard looks the key up for its own owner and releases what was
granted meanwhile, shielded from further cancellation, then lets the
``CancelledError`` pass (``acquiring.py``).

What a kind sends, and the plans of what takes more than one call, are the
sync client's (``kindbase.py``); here each is awaited.
"""

from typing import Any, AsyncIterator, Dict, Generic, List, Optional, Type, TypeVar

from .. import models
from ..kindbase import G, KindBase, S
from ..specs import ELECTIONS, LOCKS, MAX_WAIT, PAGE_SIZE, RWLOCKS, SEMAPHORES
from .handles import Acquiring, AsyncLeader, AsyncLease, AsyncPermit, AsyncRwLease
from .transport import AsyncTransport

L = TypeVar("L", bound=AsyncLease)


class AsyncKind(KindBase, Generic[G, S, L]):
    """The calls every kind shares, as coroutines."""

    handle_type: Type[AsyncLease] = AsyncLease

    def __init__(self, client: Any, http: AsyncTransport) -> None:
        self.client = client
        self._http = http

    # -- plain calls -------------------------------------------------------

    async def acquire(
        self,
        key: str,
        owner: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        priority: int = 0,
        *,
        session: Optional[str] = None,
        **fields: Any,
    ) -> G:
        """Takes ``key`` for ``owner`` once, waiting up to ``wait`` seconds (0: try once); no
        renewal (see :meth:`hold`); ``session`` as the sync ``Kind.acquire``'s. Raises as it does."""
        return await self._http.call(self._acquisition(key, owner, ttl, wait, priority, fields, session))

    async def renew(self, key: str, owner: str, token: int, ttl: float = 30.0, **ids: Any) -> G:
        """Extends a held lease to ``ttl`` seconds from now. Raises ``LeaseLost``."""
        return await self._http.call(self.spec.renew(key, self.spec.ids(owner, token, ids), ttl))

    async def release(self, key: str, owner: str, token: int, **ids: Any) -> Any:
        """Gives the lease back (one hold of a re-entered lock). Raises ``LeaseLost``."""
        return await self._http.call(self.spec.release(key, self.spec.ids(owner, token, ids)))

    async def status(self, key: str) -> S:
        """Who holds ``key`` now, and how many wait."""
        return await self._http.call(self.spec.status(key))

    async def list(self, prefix: str = "", limit: Optional[int] = None, page_size: int = PAGE_SIZE) -> AsyncIterator[S]:
        """The live ones whose storage key starts with ``prefix``, page after page, as the sync
        ``Kind.list``: ``async for status in client.locks.list(prefix="jobs/")``."""
        items = self._http.iterate(self._listing(prefix, limit, page_size))
        try:
            async for item in items:
                yield item
        finally:
            await items.aclose()  # at once, not whenever it is collected: it may hold a connection

    # -- guards --------------------------------------------------------------

    def hold(
        self,
        key: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
        **fields: Any,
    ) -> Acquiring[L]:
        """Acquires ``key`` (waiting up to ``wait`` seconds) when entered or awaited, and keeps it
        renewed every third of ``ttl`` until released::

            async with client.locks.hold("nightly", ttl=30) as lease: ...

        Raises (on entry): ``Busy`` when still taken by others after ``wait``;
        ``OutcomeUnknown`` when the connection broke after the acquire was sent.
        """
        self.spec.check(fields)  # now, not when entered
        return Acquiring(lambda: self._http.run(self._holding(key, ttl, wait, owner, priority, fields)))

    async def try_hold(
        self, key: str, ttl: float = 30.0, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[L]:
        """Like :meth:`hold` with no wait, but None when taken by others; the lease when not."""
        return await self._http.run(self._trying(key, ttl, owner, priority, fields))

    # -- what handles use ----------------------------------------------------

    async def renew_once(self, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float, deadline: float) -> Any:
        """One renewal for a handle's renewal task, which does its own retrying (``clock.py``)."""
        return await self._http.call(self._renewal(key, ids, ttl, read_timeout, deadline))

    async def release_ids(self, key: str, ids: Dict[str, Any]) -> Any:
        """Releases the lease ``ids`` names, within a deadline of its own (not the caller's)."""
        return await self._http.call(self._own_release(key, ids))


class _AsyncAudited(AsyncKind[G, S, L]):
    """A kind whose changes the broker records (locks, semaphores, rwlocks)."""

    async def history(self, key: str, limit: Optional[int] = None) -> List[models.LockEvent]:
        """The latest events of ``key``, newest first (``limit`` 1 to 1000, None: 100)."""
        return await self._http.call(self.spec.history(key, limit))


class AsyncLocks(_AsyncAudited[models.LockGrant, models.LockStatus, AsyncLease]):
    """``client.locks``: exclusive locks (re-entered by the same owner)."""

    spec, handle_type = LOCKS, AsyncLease

    async def validate(self, key: str, token: int) -> models.Validity:
        """Whether ``token`` is the live grant of ``key`` now."""
        return await self._http.call(LOCKS.validate(key, token))


class AsyncSemaphores(_AsyncAudited[models.SemaphoreGrant, models.SemaphoreStatus, AsyncPermit]):
    """``client.semaphores``: up to ``permits`` holders at once, each in its own slot."""

    spec, handle_type = SEMAPHORES, AsyncPermit


class AsyncRwLocks(_AsyncAudited[models.RwGrant, models.RwLockStatus, AsyncRwLease]):
    """``client.rwlocks``: many readers or one writer (``mode="read"`` or ``"write"``)."""

    spec, handle_type = RWLOCKS, AsyncRwLease


class AsyncElections(AsyncKind[models.Term, models.Leadership, AsyncLeader]):
    """``client.elections``: one leader at a time; campaign, resign, observe."""

    spec, handle_type = ELECTIONS, AsyncLeader

    async def leader(self, name: str) -> models.Leadership:
        """Who leads ``name`` now (``leader`` None when nobody does)."""
        return await self.status(name)

    async def observe(
        self, name: str, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> AsyncIterator[models.Leadership]:
        """The leadership of ``name`` now, then once per change of leader, reconnecting when the
        stream breaks, as the sync ``Elections.observe``::

            async for change in client.elections.observe("scheduler"):
                print(change.leader, change.term)

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        leaderships = self._http.iterate(self._observing(name, timeout, idle_timeout))
        try:
            async for leadership in leaderships:
                yield leadership
        finally:
            await leaderships.aclose()  # closes the stream now that its reader stopped
