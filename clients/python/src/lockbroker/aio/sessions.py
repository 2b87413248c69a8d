"""Sessions in the async client: :class:`AsyncSession` (what ``client.session(ttl)`` opens: kept
alive by a task, closed at the end of an ``async with`` block), the leases held in it
(:class:`AsyncSessionLease` a lock's, :class:`AsyncSessionPermit`, :class:`AsyncSessionRwLease`,
:class:`AsyncSessionLeader`, :class:`AsyncSessionMultiLease`), and :class:`AsyncSessions`
(``client.sessions``: the plain calls).

The sync ``lockbroker.sessions`` with ``await``: what does not wait is shared, in
``sessionbase.py``, and so are the guard names (``guards.SessionGuardNames``); here are the
task and ``async with``.
"""

import asyncio
from typing import Any, AsyncIterator, List, Optional

from .. import acquiring, listing, sessionspecs
from ..guards import SessionGuardNames
from ..models import SessionClosed, SessionInfo, SessionKeepalive, SessionStatus
from ..sessionbase import FanOut, SessionBase, SessionLeaseBase, SessionMultiLeaseBase
from ..specs import MAX_WAIT, PAGE_SIZE
from .handles import Acquiring, AsyncLeader, AsyncLease, AsyncMultiLease, AsyncPermit, AsyncRwLease
from .renewal import AsyncRenewer
from .transport import AsyncTransport


class AsyncSessionLease(SessionLeaseBase, AsyncLease):
    """A lease held in a session, as the sync ``SessionLease``: ``lost`` is an ``asyncio.Event``;
    ``await lease.release()`` (or the end of its ``async with``) gives it back now."""


class AsyncSessionPermit(AsyncSessionLease, AsyncPermit):
    """A semaphore permit held in a session: an :class:`AsyncPermit` (``slot``)."""


class AsyncSessionRwLease(AsyncSessionLease, AsyncRwLease):
    """A read or write lease of a rwlock held in a session: an :class:`AsyncRwLease` (``mode``)."""


class AsyncSessionLeader(AsyncSessionLease, AsyncLeader):
    """Leadership of an election held in a session: an :class:`AsyncLeader` (``term``,
    ``await resign()``)."""


class AsyncSessionMultiLease(SessionMultiLeaseBase, AsyncMultiLease):
    """Several locks held together in a session: an :class:`AsyncMultiLease` (``keys``,
    ``tokens``) released as one."""


class AsyncSession(SessionGuardNames, SessionBase):
    """A session this task keeps alive: a keepalive every third of its TTL in a task, until
    :meth:`close` (the end of its ``async with`` block, also by a cancellation)::

        async with client.session(ttl=15) as session:
            async with session.lock("job-a") as a, session.semaphore("workers", permits=4) as pool:
                await work(a.token, pool.token)

    Its guards are the sync ``Session``'s, each an ``Acquiring`` (``async with`` it, or
    ``await`` it), their ``try_`` forms coroutines. ``lost`` is an ``asyncio.Event``, set once
    as the sync ``Session.lost`` is; every lease of it is lost with it.
    """

    _lease_types = {
        "lock": AsyncSessionLease,
        "semaphore": AsyncSessionPermit,
        "rwlock": AsyncSessionRwLease,
        "election": AsyncSessionLeader,
    }
    _multi_lease_type = AsyncSessionMultiLease

    def __init__(self, client: Any, info: SessionInfo, sent: float) -> None:
        self.lost = asyncio.Event()
        self._begin(client, info)
        what = f"session {info.id!r}"
        self._keeper = AsyncRenewer(self._keepalive_once, self._clock(sent), FanOut(self), what)  # type: ignore[arg-type]

    def hold(
        self, kind: Any, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Acquiring[AsyncSessionLease]:
        """Acquires ``key`` of ``kind`` (``client.locks``, ...) in this session when entered or
        awaited, as the sync ``Session.hold``.

        Raises (now): TypeError, ValueError for a kind or fields it does not take.
        """
        self._lease_type_of(kind)  # now, not when entered
        kind.spec.check(fields)
        return Acquiring(lambda: self.client._http.run(self._holding(kind, key, wait, owner, priority, fields)))

    async def try_hold(
        self, kind: Any, key: str, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[AsyncSessionLease]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        return await self.client._http.run(acquiring.trying(self._holding(kind, key, 0.0, owner, priority, fields)))

    def multilock(
        self, keys: List[str], wait: float = MAX_WAIT, owner: Optional[str] = None
    ) -> Acquiring[AsyncSessionMultiLease]:
        """Takes every lock of ``keys`` at once in this session when entered or awaited, as the
        sync ``Session.multilock``::

            async with session.multilock(["account-1", "account-2"], wait=10) as held:
                await transfer(fence=held.tokens)
        """
        return Acquiring(lambda: self.client._http.run(self._multilocking(keys, wait, owner)))

    async def try_multilock(self, keys: List[str], owner: Optional[str] = None) -> Optional[AsyncSessionMultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        return await self.client._http.run(acquiring.trying(self._multilocking(keys, 0.0, owner)))

    async def close(self) -> Optional[SessionClosed]:
        """Stops the keepalives and ends the session, releasing every lease of it, as the sync
        ``Session.close`` (never raises a broker error)."""
        return await self.client._http.run(self._closing())

    async def _keepalive_once(self, read_timeout: float, deadline: float) -> Any:
        return await self.client._http.call(self._keepalive(read_timeout, deadline))

    async def _detach(self, lease: Any) -> None:
        self._forget(lease)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Closes as :meth:`close` does, shielded: a second cancellation of the task does not stop
        the close (it finishes in the background)."""
        await asyncio.shield(self.close())


class AsyncSessions:
    """``client.sessions``: the session calls as coroutines, as the sync ``Sessions``."""

    def __init__(self, client: Any, http: AsyncTransport) -> None:
        self.client = client
        self._http = http

    async def open(self, ttl: float = 15.0, name: Optional[str] = None, lock_delay: Optional[float] = None) -> SessionInfo:
        """Opens a session (no keepalives: see ``AsyncClient.session``)."""
        sessionspecs.check_ttl(ttl)
        return await self._http.call(sessionspecs.open_session(ttl, name, lock_delay))

    async def keepalive(self, session_id: str) -> SessionKeepalive:
        """Extends the session by its TTL from now. Raises ``SessionNotFound`` once it has ended."""
        return await self._http.call(sessionspecs.keepalive(session_id))

    async def close(self, session_id: str) -> SessionClosed:
        """Ends the session, releasing every lease in it. Raises ``SessionNotFound`` if it had ended."""
        return await self._http.call(sessionspecs.close(session_id))

    async def status(self, session_id: str) -> SessionStatus:
        """The session and every lease held in it. Raises ``SessionNotFound`` once it has ended."""
        return await self._http.call(sessionspecs.status(session_id))

    async def list(self, prefix: str = "", limit: Optional[int] = None, page_size: int = PAGE_SIZE) -> AsyncIterator[SessionInfo]:
        """The tenant's live sessions whose name starts with ``prefix``, page after page."""
        items = self._http.iterate(listing.pages(self._http.exchange, sessionspecs.LISTING, prefix, limit, page_size))
        try:
            async for item in items:
                yield item
        finally:
            await items.aclose()
