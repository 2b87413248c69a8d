"""The async client: :class:`AsyncClient`, the sync :class:`~lockbroker.Client`'s calls as
coroutines, over HTTP/1.1 on asyncio streams (``http.py``, standard library only).

It shares with the sync client everything but the I/O: the options and
their environment variables (``options.py``), the calls of each kind
(``specs.py``), the retry rules (``retry.py``), the renewal rules
(``clock.py``), the guard names (``guards.py``), the models and the errors.
One client may be used by many tasks of one event loop.
"""

import asyncio
import logging
import ssl
import time
from typing import Any, Dict, List, Optional

from .. import specs
from ..errors import Busy, LockbrokerError, OutcomeUnknown
from ..guards import GuardNames
from ..kinds import default_owner
from ..models import ForceReleased, MultiLockGrant, MultiLockReleased
from ..options import Options
from ..specs import MAX_WAIT, own_deadline
from .handles import Acquiring, AsyncMultiLease
from .kinds import AsyncElections, AsyncLocks, AsyncRwLocks, AsyncSemaphores
from .streams import AsyncEventStream
from .transport import AsyncTransport

log = logging.getLogger("lockbroker")


class AsyncClient(GuardNames):
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

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        *,
        retries: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        ca_file: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        options = Options.build(
            url, api_key, timeout, retries, backoff, max_backoff, ca_file, client_cert, client_key, ssl_context
        )
        self.timeout = timeout
        self.backoff = backoff
        self._http = AsyncTransport(options)
        self.locks = AsyncLocks(self, self._http)
        self.semaphores = AsyncSemaphores(self, self._http)
        self.rwlocks = AsyncRwLocks(self, self._http)
        self.elections = AsyncElections(self, self._http)

    @property
    def url(self) -> str:
        return self._http.url

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

    # -- multi-locks -----------------------------------------------------------

    async def acquire_multi(self, keys: List[str], owner: str, ttl: float = 30.0, wait: float = 0.0) -> MultiLockGrant:
        """Takes every lock of ``keys`` for ``owner``, all or none (no renewal: see :meth:`multilock`)."""
        return await self._http.call(specs.acquire_multi(keys, owner, ttl, wait))

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
        return Acquiring(lambda: self._multilock(keys, ttl, wait, owner))

    async def try_multilock(
        self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None
    ) -> Optional[AsyncMultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        try:
            return await self._multilock(keys, ttl, 0.0, owner)
        except Busy:
            return None

    async def _multilock(self, keys: List[str], ttl: float, wait: float, owner: Optional[str]) -> AsyncMultiLease:
        fresh = owner is None
        owner = owner or default_owner()
        sent = time.monotonic()
        try:
            grant = await self.acquire_multi(keys, owner, ttl, wait)
        except LockbrokerError as err:
            if fresh and isinstance(err, OutcomeUnknown):
                await asyncio.shield(self._give_back_multi(keys, owner))
            raise
        except BaseException:
            if fresh:
                await asyncio.shield(self._give_back_multi(keys, owner))
            raise
        return AsyncMultiLease(self, grant, ttl, sent)

    async def _renew_multi_once(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float, deadline: float
    ) -> Any:
        return await self._http.call(
            specs.renew_multi(owner, locks, ttl, read_timeout=read_timeout, retries=0, deadline=deadline)
        )

    async def _release_multi_own(self, owner: str, locks: List[Dict[str, Any]]) -> Any:
        return await self._http.call(specs.release_multi(owner, locks, deadline=own_deadline(self.timeout)))

    async def _give_back_multi(self, keys: List[str], owner: str) -> None:
        deadline = own_deadline(self.timeout)
        try:
            statuses = [await self._http.call(specs.LOCKS.status(key, deadline=deadline)) for key in keys]
            held = specs.multi_held_by(statuses, owner)
            if held:
                await self._http.call(specs.release_multi(owner, held, deadline=deadline))
        except LockbrokerError as err:
            log.warning("lockbroker: could not give back an interrupted multi-lock (it ends by its TTL): %s", err)

    # -- admin -----------------------------------------------------------------

    async def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token)."""
        return await self._http.call(specs.force_release(tenant, key))
