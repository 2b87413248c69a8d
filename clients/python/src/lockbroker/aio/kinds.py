"""The async client's kinds: ``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, the sync kinds' calls (``kinds.py``) as coroutines, sending the same
:class:`~lockbroker.specs.Spec` calls.

``hold`` returns an :class:`~lockbroker.aio.handles.Acquiring`; ``list``
and ``observe`` are async iterators. An acquire of a guard cancelled (its
task cancelled, a ``wait_for`` timing out) after it was sent leaves no lease
behind: the guard looks the key up for its own owner and releases what was
granted meanwhile, shielded from further cancellation, then lets the
``CancelledError`` pass.
"""

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Dict, Generic, List, Optional, Type, TypeVar

from .. import sse
from ..errors import Busy, DeadlineExceeded, LockbrokerError, OutcomeUnknown, Unavailable
from ..kinds import default_owner
from ..models import (
    Leadership,
    LockEvent,
    LockGrant,
    LockStatus,
    Model,
    RwGrant,
    RwLockStatus,
    SemaphoreGrant,
    SemaphoreStatus,
    Term,
    Validity,
)
from ..specs import ELECTIONS, LOCKS, MAX_WAIT, PAGE_SIZE, RWLOCKS, SEMAPHORES, LeaderChanges, Spec, own_deadline
from .handles import Acquiring, AsyncLeader, AsyncLease, AsyncPermit, AsyncRwLease
from .streams import messages
from .transport import AsyncTransport

log = logging.getLogger("lockbroker")

G = TypeVar("G", bound=Model)
S = TypeVar("S", bound=Model)
L = TypeVar("L", bound=AsyncLease)


class AsyncKind(Generic[G, S, L]):
    """The calls every kind shares, as coroutines."""

    spec: Spec = Spec()
    handle_type: Type[AsyncLease] = AsyncLease

    def __init__(self, client: Any, http: AsyncTransport) -> None:
        self.client = client
        self._http = http

    @property
    def noun(self) -> str:
        return self.spec.noun

    def __repr__(self) -> str:
        return f"<{self.spec.path} of {self.client!r}>"

    # -- plain calls -------------------------------------------------------

    async def acquire(
        self, key: str, owner: str, ttl: float = 30.0, wait: float = 0.0, priority: int = 0, **fields: Any
    ) -> G:
        """Takes ``key`` for ``owner`` once, waiting up to ``wait`` seconds (0: try once); no
        renewal (see :meth:`hold`). Raises as the sync ``Kind.acquire``."""
        return await self._http.call(self.spec.acquire(key, owner, ttl, wait, priority, fields, self.client.timeout))

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
        left, cursor = limit, None
        while left is None or left > 0:
            items, cursor = await self._http.call(
                self.spec.page(prefix, page_size if left is None else min(page_size, left), cursor)
            )
            for item in items:
                yield item
                if left is not None:
                    left -= 1
                    if left == 0:
                        return
            if cursor is None:
                return

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
        return Acquiring(lambda: self._hold(key, ttl, wait, owner, priority, fields))

    async def try_hold(
        self, key: str, ttl: float = 30.0, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[L]:
        """Like :meth:`hold` with no wait, but None when taken by others; the lease when not."""
        try:
            return await self._hold(key, ttl, 0.0, owner, priority, fields)
        except Busy:
            return None

    async def _hold(
        self, key: str, ttl: float, wait: float, owner: Optional[str], priority: int, fields: Dict[str, Any]
    ) -> L:
        self.spec.check(fields)  # before anything is sent: a mistake is not an interrupted acquire
        fresh = owner is None
        owner = owner or default_owner()
        sent = time.monotonic()
        grant = None
        try:
            grant = await self.acquire(key, owner, ttl, wait, priority, **fields)
            return self.handle_type(self, grant, ttl, sent)  # type: ignore[return-value]
        except LockbrokerError as err:
            if fresh and isinstance(err, OutcomeUnknown):
                await asyncio.shield(self._give_back(key, owner))
            raise
        except BaseException:  # CancelledError above all
            if grant is not None:
                await asyncio.shield(self._release_quietly(key, self.spec.lease_ids(grant)))
            elif fresh:
                await asyncio.shield(self._give_back(key, owner))
            raise

    # -- what handles use ----------------------------------------------------

    async def renew_once(self, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float, deadline: float) -> Any:
        """One renewal for a handle's renewal task, which does its own retrying (``clock.py``)."""
        return await self._http.call(
            self.spec.renew(key, ids, ttl, read_timeout=read_timeout, retries=0, deadline=deadline)
        )

    async def release_ids(self, key: str, ids: Dict[str, Any]) -> Any:
        """Releases the lease ``ids`` names, within a deadline of its own (not the caller's)."""
        return await self._http.call(self.spec.release(key, ids, deadline=own_deadline(self.client.timeout)))

    async def _give_back(self, key: str, owner: str) -> None:
        """After an acquire whose answer this task did not see: releases what ``owner`` holds of
        ``key`` now, if anything (best effort; what is left ends by its TTL)."""
        try:
            status = await self._http.call(self.spec.status(key, deadline=own_deadline(self.client.timeout)))
            ids = self.spec.held_by(status, owner)
        except LockbrokerError as err:
            log.warning(
                "lockbroker: could not find out whether %s %r was granted (if so it ends by its TTL): %s",
                self.noun,
                key,
                err,
            )
            return
        if ids is not None:
            await self._release_quietly(key, ids)

    async def _release_quietly(self, key: str, ids: Dict[str, Any]) -> None:
        try:
            await self.release_ids(key, ids)
        except LockbrokerError as err:
            log.warning(
                "lockbroker: releasing %s %r after an interrupted acquire failed (it ends by its TTL): %s",
                self.noun,
                key,
                err,
            )


class _AsyncAudited(AsyncKind[G, S, L]):
    """A kind whose changes the broker records (locks, semaphores, rwlocks)."""

    async def history(self, key: str, limit: Optional[int] = None) -> List[LockEvent]:
        """The latest events of ``key``, newest first (``limit`` 1 to 1000, None: 100)."""
        return await self._http.call(self.spec.history(key, limit))


class AsyncLocks(_AsyncAudited[LockGrant, LockStatus, AsyncLease]):
    """``client.locks``: exclusive locks (re-entered by the same owner)."""

    spec, handle_type = LOCKS, AsyncLease

    async def validate(self, key: str, token: int) -> Validity:
        """Whether ``token`` is the live grant of ``key`` now."""
        return await self._http.call(LOCKS.validate(key, token))


class AsyncSemaphores(_AsyncAudited[SemaphoreGrant, SemaphoreStatus, AsyncPermit]):
    """``client.semaphores``: up to ``permits`` holders at once, each in its own slot."""

    spec, handle_type = SEMAPHORES, AsyncPermit


class AsyncRwLocks(_AsyncAudited[RwGrant, RwLockStatus, AsyncRwLease]):
    """``client.rwlocks``: many readers or one writer (``mode="read"`` or ``"write"``)."""

    spec, handle_type = RWLOCKS, AsyncRwLease


class AsyncElections(AsyncKind[Term, Leadership, AsyncLeader]):
    """``client.elections``: one leader at a time; campaign, resign, observe."""

    spec, handle_type = ELECTIONS, AsyncLeader

    async def leader(self, name: str) -> Leadership:
        """Who leads ``name`` now (``leader`` None when nobody does)."""
        return await self.status(name)

    async def observe(
        self, name: str, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> AsyncIterator[Leadership]:
        """The leadership of ``name`` now, then once per change of leader, reconnecting when the
        stream breaks, as the sync ``Elections.observe``::

            async for change in client.elections.observe("scheduler"):
                print(change.leader, change.term)

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        end = None if timeout is None else time.monotonic() + timeout
        changes, breaks = LeaderChanges(), 0
        read_timeout = idle_timeout if timeout is None else max(sse.MIN_WAIT, min(idle_timeout, timeout))
        while end is None or time.monotonic() < end:
            try:
                response = await self._http.open(ELECTIONS.observe(name, read_timeout, end))
            except DeadlineExceeded:
                return
            except Unavailable:
                if end is not None and time.monotonic() >= end:
                    return
                raise
            stream = messages(response, end, idle_timeout, f"observing {name!r}")
            try:
                async for message in stream:
                    if message.event == "leader":
                        breaks = 0
                        leadership = Leadership.from_json(message.data)
                        if changes.is_new(leadership):
                            yield leadership
            except Unavailable:
                pass  # broken or idle: connect again
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
            breaks += 1
            if breaks > 1:  # a stream that keeps ending at once is given the client's backoff
                delay = self._http.retry.backoff_delay(breaks - 1)
                await asyncio.sleep(delay if end is None else max(0.0, min(delay, end - time.monotonic())))
