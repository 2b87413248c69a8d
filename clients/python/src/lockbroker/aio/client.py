"""The async client: :class:`AsyncClient`, the sync :class:`~lockbroker.Client`'s calls as
coroutines, over HTTP/1.1 on asyncio streams (``http.py``, standard library only).

It shares with the sync client everything but the I/O: how it is built
(``clientbase.py``, ``options.py``), the calls of each kind (``specs.py``)
and the procedures that take more than one (plans, ``steps.py``: the
exchange and its retries, guards and their clean-up, listing, streams,
renewal), the guard names (``guards.py``), the models and the errors. One
client may be used by many tasks of one event loop.
"""

from typing import Any, Dict, List, Optional

from .. import acquiring, specs
from ..clientbase import ClientBase
from ..guards import GuardNames
from ..models import ForceReleased, MultiLockGrant, MultiLockReleased
from ..specs import MAX_WAIT
from .handles import Acquiring, AsyncMultiLease
from .kinds import AsyncElections, AsyncLocks, AsyncRwLocks, AsyncSemaphores
from .sessions import AsyncSession, AsyncSessions
from .streams import AsyncEventStream
from .transport import AsyncTransport


class AsyncClient(GuardNames, ClientBase):
    """A connection to one broker as one tenant, for asyncio.

    Takes the arguments of :class:`~lockbroker.Client` (and the same
    environment variables). The guards (``guards.py``) return an
    :class:`~lockbroker.aio.handles.Acquiring`::

        client = AsyncClient()    # $LOCKBROKER_URL, $LOCKBROKER_API_KEY, ...
        async with client.lock("nightly", ttl=30) as lease:
            await run_job(fencing_token=lease.token)

    The lease renews itself in a task every third of the TTL;
    ``lease.lost`` is an ``asyncio.Event``. Leaving the block releases it,
    also by an exception or a cancellation of the enclosing task; a task
    cancelled while it waits to acquire leaves no lease behind.

    Raises:
        ValueError: as :class:`~lockbroker.Client`.
    """

    _transport_type = AsyncTransport
    _kind_types = (AsyncLocks, AsyncSemaphores, AsyncRwLocks, AsyncElections)
    _multi_lease_type = AsyncMultiLease
    _session_type = AsyncSession
    _sessions_type = AsyncSessions
    _http: AsyncTransport
    sessions: AsyncSessions
    locks: AsyncLocks
    semaphores: AsyncSemaphores
    rwlocks: AsyncRwLocks
    elections: AsyncElections

    def __repr__(self) -> str:
        return f"AsyncClient(url={self.url!r})"

    # -- events ----------------------------------------------------------------

    def events(
        self, prefix: str = "", after: Optional[int] = None, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> AsyncEventStream:
        """Every change of this tenant's locks, semaphores and rwlocks under ``prefix``, from when
        it connects (or after the event id ``after``), as the sync ``Client.events``::

            async with client.events(prefix="job-") as stream:   # connected here
                async for event in stream:
                    print(event.event, event.storage_key, event.token)
        """
        return AsyncEventStream(self._http, prefix, after, timeout, idle_timeout)

    # -- sessions --------------------------------------------------------------

    def session(
        self, ttl: float = 15.0, name: Optional[str] = None, lock_delay: Optional[float] = None
    ) -> Acquiring[AsyncSession]:
        """Opens a session when entered or awaited, and keeps it alive in a task until it is closed,
        as the sync ``Client.session``::

            async with client.session(ttl=15) as session:
                async with session.lock("job-a") as a, session.lock("job-b") as b:
                    await run_job(fencing_tokens=(a.token, b.token))

        ``session = await client.session(15)`` hands it over; close it with
        ``await session.close()`` (or its own ``async with``).
        """
        return Acquiring(lambda: self._http.run(self._opening(ttl, name, lock_delay)))

    # -- multi-locks -----------------------------------------------------------

    async def acquire_multi(
        self, keys: List[str], owner: str, ttl: float = 30.0, wait: float = 0.0, *, session: Optional[str] = None
    ) -> MultiLockGrant:
        """Takes every lock of ``keys`` for ``owner``, all or none (no renewal: see :meth:`multilock`);
        ``session`` as the sync ``Client.acquire_multi``'s."""
        return await self._http.call(specs.acquire_multi(keys, owner, ttl, wait, session))

    async def renew_multi(self, owner: str, locks: List[Dict[str, Any]], ttl: float = 30.0) -> MultiLockGrant:
        """Extends every lease of ``locks`` (``[{"key", "token"}]``), all or none. Raises ``LeaseLost``."""
        return await self._http.call(specs.renew_multi(owner, locks, ttl))

    async def release_multi(self, owner: str, locks: List[Dict[str, Any]]) -> List[MultiLockReleased]:
        """Releases every key still held by its token; ``lost`` marks the others."""
        return await self._http.call(specs.release_multi(owner, locks))

    def multilock(
        self, keys: List[str], ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None
    ) -> Acquiring[AsyncMultiLease]:
        """Takes every lock of ``keys`` at once when entered or awaited, and keeps them renewed::

            async with client.multilock(["account-1", "account-2"], ttl=30, wait=10) as held:
                await transfer(fence=held.tokens)
        """
        return Acquiring(lambda: self._http.run(self._multilocking(keys, ttl, wait, owner)))

    async def try_multilock(
        self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None
    ) -> Optional[AsyncMultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        return await self._http.run(acquiring.trying(self._multilocking(keys, ttl, 0.0, owner)))

    async def _renew_multi_once(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float, deadline: float
    ) -> Any:
        return await self._http.call(self._multi_renewal(owner, locks, ttl, read_timeout, deadline))

    async def _release_multi_own(self, owner: str, locks: List[Dict[str, Any]]) -> Any:
        return await self._http.call(self._own_multi_release(owner, locks))

    # -- admin -----------------------------------------------------------------

    async def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token)."""
        return await self._http.call(specs.force_release(tenant, key))
