"""The client: one object per broker and tenant, safe to share between threads.

Every kind of lease is one :class:`~lockbroker.kinds.Kind` (``kinds.py``):
``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, each with ``acquire``/``renew``/``release``/
``status``/``list`` (and ``history``) and the guards ``hold``/``try_hold``.
The client adds the guards by their usual names (``lock``, ``semaphore``,
``read_lock``, ``campaign``, ...), multi-locks, the admin force-release and
the event stream.

Durations are seconds (floats), as elsewhere in Python; the broker's
``*_ms`` fields are filled from them.
"""

import os
import time
from typing import Any, Dict, List, Optional

from .errors import Busy
from .events import EventStream
from .handles import Leader, Lease, MultiLease, Permit, RwLease
from .kinds import MAX_WAIT, Elections, Locks, RwLocks, Semaphores, default_owner, ms
from .models import ForceReleased, MultiLockGrant, MultiLockReleased
from .transport import Transport, quote_key, shrinking_wait

__all__ = ["MAX_WAIT", "Client", "default_owner"]


class Client:
    """A connection to one broker as one tenant.

    Args:
        url: the broker's base URL; default ``$LOCKBROKER_URL``.
        api_key: the tenant's API key; default ``$LOCKBROKER_API_KEY``.
        timeout: seconds to connect and to wait for each answer (a waiting
            acquire adds its ``wait``).
        retries: how often a ``503`` or a connection failure is tried again,
            with exponential backoff from ``backoff`` up to ``max_backoff``
            seconds (and at least the broker's ``retry_after_ms``). ``4xx``
            answers are never retried; an acquire whose connection broke
            after it was sent is not retried either (it may have been granted).

    Raises:
        ValueError: no URL given and ``LOCKBROKER_URL`` unset, or not http(s).
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
    ) -> None:
        url = url or os.environ.get("LOCKBROKER_URL")
        if not url:
            raise ValueError("no broker URL: pass url= or set LOCKBROKER_URL")
        if api_key is None:
            api_key = os.environ.get("LOCKBROKER_API_KEY")
        self.timeout = timeout
        self.backoff = backoff
        self._http = Transport(url, api_key, timeout, retries, backoff, max_backoff)
        self.locks = Locks(self, self._http)
        self.semaphores = Semaphores(self, self._http)
        self.rwlocks = RwLocks(self, self._http)
        self.elections = Elections(self, self._http)

    @property
    def url(self) -> str:
        return self._http.url

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    # -- guards by their usual names; ``terms``: ttl, wait, owner, priority, as for Kind.hold --

    def lock(self, key: str, *terms: Any, **named: Any) -> Lease:
        """Takes the lock ``key``, waiting up to ``wait`` seconds (default :data:`MAX_WAIT`), and
        keeps it renewed until released (:meth:`Kind.hold`)::

            with client.lock("nightly", ttl=30, wait=10) as lease:
                run_job(fencing_token=lease.token)

        Raises:
            LockHeld: still held by another owner after ``wait``.
        """
        return self.locks.hold(key, *terms, **named)

    def try_lock(self, key: str, *terms: Any, **named: Any) -> Optional[Lease]:
        """Like :meth:`lock` with no wait, but None when another owner holds it."""
        return self.locks.try_hold(key, *terms, **named)

    def semaphore(self, key: str, permits: int, *terms: Any, **named: Any) -> Permit:
        """Takes one of ``permits`` slots of the semaphore ``key`` and keeps it renewed::

            with client.semaphore("pool", permits=3, ttl=30) as permit:
                use_connection(permit.slot)
        """
        return self.semaphores.hold(key, *terms, permits=permits, **named)

    def try_semaphore(self, key: str, permits: int, *terms: Any, **named: Any) -> Optional[Permit]:
        """Like :meth:`semaphore` with no wait, but None when every permit is taken."""
        return self.semaphores.try_hold(key, *terms, permits=permits, **named)

    def rwlock(self, key: str, mode: str, *terms: Any, **named: Any) -> RwLease:
        """Takes the rwlock ``key`` in ``mode`` (``"read"`` or ``"write"``) and keeps it renewed."""
        return self.rwlocks.hold(key, *terms, mode=mode, **named)

    def read_lock(self, key: str, *terms: Any, **named: Any) -> RwLease:
        """A shared (read) lease of the rwlock ``key``, renewed until released."""
        return self.rwlock(key, "read", *terms, **named)

    def write_lock(self, key: str, *terms: Any, **named: Any) -> RwLease:
        """An exclusive (write) lease of the rwlock ``key``, renewed until released."""
        return self.rwlock(key, "write", *terms, **named)

    def try_read_lock(self, key: str, *terms: Any, **named: Any) -> Optional[RwLease]:
        """Like :meth:`read_lock` with no wait, but None when a writer holds it or waits."""
        return self.rwlocks.try_hold(key, *terms, mode="read", **named)

    def try_write_lock(self, key: str, *terms: Any, **named: Any) -> Optional[RwLease]:
        """Like :meth:`write_lock` with no wait, but None when anyone holds it or waits."""
        return self.rwlocks.try_hold(key, *terms, mode="write", **named)

    def campaign(
        self, name: str, ttl: float = 30.0, wait: float = MAX_WAIT, candidate: Optional[str] = None, priority: int = 0
    ) -> Leader:
        """Becomes leader of ``name``, waiting up to ``wait`` seconds, and stays leader until resigning::

            with client.campaign("scheduler", ttl=10, wait=60) as leader:
                while not leader.lost.wait(1.0):
                    schedule(term=leader.term)

        Raises:
            LockHeld: another candidate still leads after ``wait``.
        """
        return self.elections.hold(name, ttl, wait, candidate, priority)

    def try_campaign(
        self, name: str, ttl: float = 30.0, candidate: Optional[str] = None, priority: int = 0
    ) -> Optional[Leader]:
        """Like :meth:`campaign` with no wait, but None when another candidate leads."""
        return self.elections.try_hold(name, ttl, candidate, priority)

    # -- events ----------------------------------------------------------------

    def events(
        self, prefix: str = "", after: Optional[int] = None, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> EventStream:
        """Every change of this tenant's locks, semaphores and rwlocks whose storage key starts with
        ``prefix``, from now on (or after the event id ``after``), as :class:`Event` values::

            with client.events(prefix="job-") as stream:
                for event in stream:
                    print(event.event, event.kind, event.storage_key, event.token)

        Connected when this returns; reconnects with ``Last-Event-ID`` when the
        stream breaks or stays silent for ``idle_timeout`` seconds. Iterating
        ends after ``timeout`` seconds (None: never) or :meth:`EventStream.close`.

        Raises:
            TooManyStreams: the tenant has its most streams open on this broker.
        """
        return EventStream(self._http, prefix, after, timeout, idle_timeout)

    # -- multi-locks -----------------------------------------------------------

    def acquire_multi(self, keys: List[str], owner: str, ttl: float = 30.0, wait: float = 0.0) -> MultiLockGrant:
        """Takes every lock of ``keys`` for ``owner``, all or none (no renewal: see :meth:`multilock`).

        Raises:
            LockHeld: some key stayed busy for ``wait`` seconds (none was granted).
            BadRequest: no keys, more than 64, or two naming one lock.
        """
        body = {"keys": list(keys), "owner": owner, "ttl_ms": ms(ttl), "wait_ms": ms(wait)}
        answer = self._http.request(
            "POST",
            "/v1/multilock/acquire",
            shrinking_wait(body, wait),
            idempotent=False,
            read_timeout=self.timeout + max(0.0, wait),
        )
        return MultiLockGrant.from_json(answer)

    def renew_multi(self, owner: str, locks: List[Dict[str, Any]], ttl: float = 30.0) -> MultiLockGrant:
        """Extends every lease of ``locks`` (``[{"key", "token"}]``), all or none. Raises ``LeaseLost``."""
        return MultiLockGrant.from_json(self._renew_multi_once(owner, locks, ttl, None, None))

    def release_multi(self, owner: str, locks: List[Dict[str, Any]]) -> List[MultiLockReleased]:
        """Releases every key still held by its token; ``lost`` marks the others. Raises ``LeaseLost`` if none was."""
        body = {"owner": owner, "locks": locks}
        answer = self._http.request("POST", "/v1/multilock/release", body, idempotent=True)
        return [MultiLockReleased.from_json(entry) for entry in answer.get("locks") or []]

    def multilock(self, keys: List[str], ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None) -> MultiLease:
        """Takes every lock of ``keys`` at once, waiting up to ``wait`` seconds, and keeps them renewed::

            with client.multilock(["account-1", "account-2"], ttl=30, wait=10) as held:
                transfer(fence=held.tokens)

        Raises:
            LockHeld: some key stayed busy after ``wait`` (none is held).
        """
        sent = time.monotonic()
        grant = self.acquire_multi(keys, owner or default_owner(), ttl, wait)
        return MultiLease(self, grant, ttl, sent)

    def try_multilock(self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None) -> Optional[MultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        try:
            return self.multilock(keys, ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    def _renew_multi_once(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: Optional[float], retries: Optional[int] = 0
    ) -> Any:
        """One multi-lock renewal (for a :class:`MultiLease`'s renewal thread: no retries)."""
        body = {"owner": owner, "ttl_ms": ms(ttl), "locks": locks}
        return self._http.request(
            "POST", "/v1/multilock/renew", body, idempotent=True, read_timeout=read_timeout, retries=retries
        )

    # -- admin -----------------------------------------------------------------

    def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token).

        Raises:
            NotFound: no such tenant, or nobody holds the lock.
        """
        path = f"/v1/admin/tenants/{quote_key(tenant)}/locks/{quote_key(key)}/release"
        return ForceReleased.from_json(self._http.request("POST", path, None, idempotent=False))
