"""Sessions in the async client: :class:`AsyncSession` (what ``client.session(ttl)`` opens: kept
alive by a task, closed at the end of an ``async with`` block), :class:`AsyncSessionLease` (a
lease held in it), and :class:`AsyncSessions` (``client.sessions``: the plain calls).

The sync ``lockbroker.sessions`` with ``await``: what does not wait is shared, in
``sessionbase.py``; here are the task and ``async with``.
"""

import asyncio
from typing import Any, AsyncIterator, Optional

from .. import acquiring, listing, sessionspecs
from ..models import SessionClosed, SessionInfo, SessionKeepalive, SessionStatus
from ..sessionbase import FanOut, SessionBase, SessionLeaseBase
from ..specs import MAX_WAIT, PAGE_SIZE
from .handles import Acquiring, AsyncHeld
from .renewal import AsyncRenewer
from .transport import AsyncTransport


class AsyncSessionLease(SessionLeaseBase, AsyncHeld):
    """A lease held in a session, as the sync ``SessionLease``: ``lost`` is an ``asyncio.Event``;
    ``await lease.release()`` (or the end of its ``async with``) gives it back now."""


class AsyncSession(SessionBase):
    """A session this task keeps alive: a keepalive every third of its TTL in a task, until
    :meth:`close` (the end of its ``async with`` block, also by a cancellation)::

        async with client.session(ttl=15) as session:
            async with session.lock("job-a") as a, session.lock("job-b") as b:
                await work(a.token, b.token)

    ``lost`` is an ``asyncio.Event``, set once as the sync ``Session.lost`` is; every lease of it
    is lost with it.
    """

    _lease_type = AsyncSessionLease

    def __init__(self, client: Any, info: SessionInfo, sent: float) -> None:
        self.lost = asyncio.Event()
        self._begin(client, info)
        what = f"session {info.id!r}"
        self._keeper = AsyncRenewer(self._keepalive_once, self._clock(sent), FanOut(self), what)  # type: ignore[arg-type]

    def hold(
        self, kind: Any, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Acquiring[AsyncSessionLease]:
        """Acquires ``key`` of ``kind`` (``client.locks``) in this session when entered or awaited,
        as the sync ``Session.hold``."""
        return Acquiring(lambda: self.client._http.run(self._holding(kind, key, wait, owner, priority, fields)))

    async def try_hold(
        self, kind: Any, key: str, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[AsyncSessionLease]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        return await self.client._http.run(acquiring.trying(self._holding(kind, key, 0.0, owner, priority, fields)))

    def lock(
        self, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0
    ) -> Acquiring[AsyncSessionLease]:
        """Takes the lock ``key`` in this session when entered or awaited (``async with
        session.lock(k) as lease``, or ``lease = await session.lock(k)``), as the sync
        ``Session.lock``."""
        return self.hold(self.client.locks, key, wait, owner, priority)

    async def try_lock(self, key: str, owner: Optional[str] = None, priority: int = 0) -> Optional[AsyncSessionLease]:
        """Like :meth:`lock` with no wait, but None when another owner holds it."""
        return await self.try_hold(self.client.locks, key, owner, priority)

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
