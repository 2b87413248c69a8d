"""The client: one object per broker and tenant, safe to share between threads.

Two layers, mirroring the broker's nouns:

- guarded calls (``lock``, ``try_lock``, ``multilock``, ``try_multilock``,
  ``semaphore``, ``try_semaphore``, ``read_lock``, ``write_lock``, ``try_read_lock``,
  ``try_write_lock``, ``campaign``, ``try_campaign``) return handles (``handles.py``) that renew
  in the background and release on ``with`` exit;
- plain calls (``acquire``/``renew``/``release``/``status`` and their
  semaphore and election counterparts, ``leader``, ``observe``) do one
  request each and return the typed answer (``models.py``), for callers
  that manage leases themselves.

Durations are seconds (floats), as elsewhere in Python; the broker's
``*_ms`` fields are filled from them.
"""

import os
import socket
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

from .errors import Busy, Unreachable
from .handles import Leader, Lease, MultiLease, Permit, RwLease
from .models import (
    ForceReleased,
    Leadership,
    LockEvent,
    LockGrant,
    LockStatus,
    MultiLockGrant,
    MultiLockReleased,
    Released,
    RwGrant,
    RwLockStatus,
    SemaphoreGrant,
    SemaphoreStatus,
    Term,
    Validity,
)
from .sse import events
from .transport import Body, Transport, quote_key

#: The broker's longest ``wait_ms`` (API.md), in seconds: the default wait of guarded calls.
MAX_WAIT = 300.0


def default_owner() -> str:
    """``host:pid:uuid``: unique per call, so two ``with`` blocks of one process never re-enter each other's lock."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


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

    @property
    def url(self) -> str:
        return self._http.url

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    # -- locks -----------------------------------------------------------

    def acquire(
        self, key: str, owner: str, ttl: float = 30.0, wait: float = 0.0, priority: int = 0
    ) -> LockGrant:
        """Takes the lock ``key`` for ``owner`` (no renewal: see :meth:`lock`).

        ``wait`` seconds in the queue (0: try once). The same owner again
        re-enters: same token, ``hold_count`` + 1.

        Raises:
            LockHeld: another owner holds it (after ``wait``).
            BadRequest, InvalidKey, Unauthenticated, Unavailable, ...: see ``errors``.
        """
        body = {"owner": owner, "ttl_ms": _ms(ttl), "wait_ms": _ms(wait), "priority": priority}
        return LockGrant.from_json(self._acquire_call("locks", key, "acquire", body, wait))

    def renew(self, key: str, owner: str, token: int, ttl: float = 30.0) -> LockGrant:
        """Extends a held lease to ``ttl`` seconds from now. Raises ``LeaseLost`` once it expired."""
        body = {"owner": owner, "token": token, "ttl_ms": _ms(ttl)}
        return LockGrant.from_json(self._post("locks", key, "renew", body, idempotent=True))

    def release(self, key: str, owner: str, token: int) -> Released:
        """Gives one hold back. Raises ``LeaseLost`` when the token is not the owner's live grant."""
        body = {"owner": owner, "token": token}
        return Released.from_json(self._post("locks", key, "release", body, idempotent=True))

    def status(self, key: str) -> LockStatus:
        """Who holds ``key`` now, with which token, and how many wait."""
        return LockStatus.from_json(self._get("locks", key))

    def lock(
        self,
        key: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
    ) -> Lease:
        """Takes the lock, waiting up to ``wait`` seconds, and keeps it renewed until released.

        Use it in a ``with`` block, which releases it at the end (also on an
        exception)::

            with client.lock("nightly", ttl=30, wait=10) as lease:
                run_job(fencing_token=lease.token)

        Raises:
            LockHeld: still held by another owner after ``wait``.
        """
        owner = owner or default_owner()
        sent = time.monotonic()
        grant = self.acquire(key, owner, ttl, wait, priority)
        return Lease(self, grant, ttl, sent)

    def try_lock(self, key: str, ttl: float = 30.0, owner: Optional[str] = None) -> Optional[Lease]:
        """Like :meth:`lock` with no wait, but None when another owner holds the lock."""
        try:
            return self.lock(key, ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    def validate(self, key: str, token: int) -> Validity:
        """Whether ``token`` is the live grant of ``key`` now (a sequencer check; may be stale on arrival)."""
        return Validity.from_json(self._post("locks", key, "validate", {"token": token}, idempotent=True))

    def history(self, key: str, limit: Optional[int] = None) -> List[LockEvent]:
        """The latest events of ``key`` (grants, releases, expiries, handoffs, force-releases), newest
        first; ``limit`` 1 to 1000, None for the broker's default (100). Raises ``BadRequest`` out of range."""
        query = "" if limit is None else f"?limit={int(limit)}"
        answer = self._http.request("GET", f"/v1/locks/{quote_key(key)}/history{query}", idempotent=True)
        return [LockEvent.from_json(e) for e in answer["events"]]

    # -- multi-locks -----------------------------------------------------

    def acquire_multi(self, keys: List[str], owner: str, ttl: float = 30.0, wait: float = 0.0) -> MultiLockGrant:
        """Takes every lock of ``keys`` for ``owner``, all or none (no renewal: see :meth:`multilock`).

        Raises:
            LockHeld: some key stayed busy for ``wait`` seconds (none was granted).
            BadRequest: no keys, more than 64, or two naming one lock.
        """
        ends = time.monotonic() + max(0.0, wait)

        def body_now() -> Dict[str, Any]:
            left = _ms(max(0.0, ends - time.monotonic()))
            return {"keys": list(keys), "owner": owner, "ttl_ms": _ms(ttl), "wait_ms": left}

        answer = self._http.request(
            "POST", "/v1/multilock/acquire", body_now, idempotent=False, read_timeout=self.timeout + max(0.0, wait)
        )
        return MultiLockGrant.from_json(answer)

    def renew_multi(self, owner: str, locks: List[Dict[str, Any]], ttl: float = 30.0) -> MultiLockGrant:
        """Extends every lease of ``locks`` (``[{"key", "token"}]``), all or none. Raises ``LeaseLost``."""
        body = {"owner": owner, "ttl_ms": _ms(ttl), "locks": locks}
        return MultiLockGrant.from_json(self._http.request("POST", "/v1/multilock/renew", body, idempotent=True))

    def release_multi(self, owner: str, locks: List[Dict[str, Any]]) -> List[MultiLockReleased]:
        """Releases every key still held by its token; ``lost`` marks the others. Raises ``LeaseLost`` if none was."""
        body = {"owner": owner, "locks": locks}
        answer = self._http.request("POST", "/v1/multilock/release", body, idempotent=True)
        return [MultiLockReleased.from_json(entry) for entry in answer.get("locks") or []]

    def multilock(
        self, keys: List[str], ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None
    ) -> MultiLease:
        """Takes every lock of ``keys`` at once, waiting up to ``wait`` seconds, and keeps them renewed::

            with client.multilock(["account-1", "account-2"], ttl=30, wait=10) as held:
                transfer(fence=held.tokens)

        Raises:
            LockHeld: some key stayed busy after ``wait`` (none is held).
        """
        owner = owner or default_owner()
        sent = time.monotonic()
        grant = self.acquire_multi(keys, owner, ttl, wait)
        return MultiLease(self, grant, ttl, sent)

    def try_multilock(self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None) -> Optional[MultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        try:
            return self.multilock(keys, ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token).

        Raises:
            NotFound: no such tenant, or nobody holds the lock.
        """
        path = f"/v1/admin/tenants/{quote_key(tenant)}/locks/{quote_key(key)}/release"
        return ForceReleased.from_json(self._http.request("POST", path, None, idempotent=False))

    # -- semaphores ------------------------------------------------------

    def acquire_permit(
        self,
        key: str,
        owner: str,
        permits: int,
        ttl: float = 30.0,
        wait: float = 0.0,
        priority: int = 0,
    ) -> SemaphoreGrant:
        """Takes one of ``permits`` slots of the semaphore ``key`` (no renewal: see :meth:`semaphore`).

        Raises:
            SemaphoreFull: every permit is taken (after ``wait``).
            PermitsMismatch: the semaphore exists with another size.
        """
        body = {
            "owner": owner,
            "permits": permits,
            "ttl_ms": _ms(ttl),
            "wait_ms": _ms(wait),
            "priority": priority,
        }
        return SemaphoreGrant.from_json(self._acquire_call("semaphores", key, "acquire", body, wait))

    def renew_permit(self, key: str, owner: str, slot: int, token: int, ttl: float = 30.0) -> SemaphoreGrant:
        """Extends a held permit. Raises ``LeaseLost`` once it expired."""
        body = {"owner": owner, "slot": slot, "token": token, "ttl_ms": _ms(ttl)}
        return SemaphoreGrant.from_json(self._post("semaphores", key, "renew", body, idempotent=True))

    def release_permit(self, key: str, owner: str, slot: int, token: int) -> Released:
        """Gives a permit back. Raises ``LeaseLost`` when it is not the owner's live permit."""
        body = {"owner": owner, "slot": slot, "token": token}
        return Released.from_json(self._post("semaphores", key, "release", body, idempotent=True))

    def semaphore_status(self, key: str) -> SemaphoreStatus:
        """The semaphore's size, its live holders and its waiters."""
        return SemaphoreStatus.from_json(self._get("semaphores", key))

    def semaphore(
        self,
        key: str,
        permits: int,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
    ) -> Permit:
        """Takes a permit, waiting up to ``wait`` seconds, and keeps it renewed until released::

            with client.semaphore("pool", permits=3, ttl=30) as slot:
                use_connection(slot.slot)
        """
        owner = owner or default_owner()
        sent = time.monotonic()
        grant = self.acquire_permit(key, owner, permits, ttl, wait, priority)
        return Permit(self, grant, ttl, sent)

    def try_semaphore(
        self, key: str, permits: int, ttl: float = 30.0, owner: Optional[str] = None
    ) -> Optional[Permit]:
        """Like :meth:`semaphore` with no wait, but None when the semaphore is full."""
        try:
            return self.semaphore(key, permits, ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    # -- reader-writer locks ---------------------------------------------

    def acquire_rw(
        self,
        key: str,
        owner: str,
        mode: str,
        ttl: float = 30.0,
        wait: float = 0.0,
        priority: int = 0,
    ) -> RwGrant:
        """Takes the rwlock ``key`` in ``mode`` (``"read"`` or ``"write"``) for ``owner`` (no renewal: see :meth:`read_lock`).

        Many readers or one writer; a queued writer blocks new readers. The
        same owner asking again for the mode it holds gets its lease back
        renewed (same token).

        Raises:
            LockHeld: the mode is not available (after ``wait``).
        """
        if mode not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', not {mode!r}")
        body = {"owner": owner, "mode": mode, "ttl_ms": _ms(ttl), "wait_ms": _ms(wait), "priority": priority}
        return RwGrant.from_json(self._acquire_call("rwlocks", key, "acquire", body, wait))

    def renew_rw(self, key: str, owner: str, token: int, ttl: float = 30.0) -> RwGrant:
        """Extends a held read or write lease. Raises ``LeaseLost`` once it expired."""
        body = {"owner": owner, "token": token, "ttl_ms": _ms(ttl)}
        return RwGrant.from_json(self._post("rwlocks", key, "renew", body, idempotent=True))

    def release_rw(self, key: str, owner: str, token: int) -> Released:
        """Ends a read or write lease. Raises ``LeaseLost`` when it is not the owner's live lease."""
        body = {"owner": owner, "token": token}
        return Released.from_json(self._post("rwlocks", key, "release", body, idempotent=True))

    def rwlock_status(self, key: str) -> RwLockStatus:
        """The rwlock's live writer or readers, and how many wait."""
        return RwLockStatus.from_json(self._get("rwlocks", key))

    def rwlock(
        self,
        key: str,
        mode: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
    ) -> RwLease:
        """Takes the rwlock in ``mode``, waiting up to ``wait`` seconds, and keeps it renewed until released."""
        owner = owner or default_owner()
        sent = time.monotonic()
        grant = self.acquire_rw(key, owner, mode, ttl, wait, priority)
        return RwLease(self, grant, ttl, sent)

    def read_lock(
        self, key: str, ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0
    ) -> RwLease:
        """A shared (read) lease of the rwlock ``key``, renewed until released::

            with client.read_lock("config", wait=10) as lease:
                read_config(fencing_token=lease.token)
        """
        return self.rwlock(key, "read", ttl, wait, owner, priority)

    def write_lock(
        self, key: str, ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0
    ) -> RwLease:
        """An exclusive (write) lease of the rwlock ``key``, renewed until released."""
        return self.rwlock(key, "write", ttl, wait, owner, priority)

    def try_read_lock(self, key: str, ttl: float = 30.0, owner: Optional[str] = None) -> Optional[RwLease]:
        """Like :meth:`read_lock` with no wait, but None when a writer holds it or waits."""
        try:
            return self.rwlock(key, "read", ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    def try_write_lock(self, key: str, ttl: float = 30.0, owner: Optional[str] = None) -> Optional[RwLease]:
        """Like :meth:`write_lock` with no wait, but None when anyone holds it or waits."""
        try:
            return self.rwlock(key, "write", ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    # -- elections -------------------------------------------------------

    def campaign_once(self, name: str, candidate: str, ttl: float = 30.0, wait: float = 0.0) -> Term:
        """Stands for leader of ``name`` once (no renewal: see :meth:`campaign`).

        A leader campaigning again stays leader of the same term.

        Raises:
            LockHeld: another candidate leads (after ``wait``).
        """
        body = {"candidate": candidate, "ttl_ms": _ms(ttl), "wait_ms": _ms(wait)}
        return Term.from_json(self._acquire_call("elections", name, "campaign", body, wait))

    def renew_term(self, name: str, candidate: str, term: int, ttl: float = 30.0) -> Term:
        """Extends a leadership. Raises ``LeaseLost`` with a stale term or once it expired."""
        body = {"candidate": candidate, "term": term, "ttl_ms": _ms(ttl)}
        return Term.from_json(self._post("elections", name, "renew", body, idempotent=True))

    def resign(self, name: str, candidate: str, term: int) -> None:
        """Steps down. Raises ``LeaseLost`` with a stale term."""
        self._post("elections", name, "resign", {"candidate": candidate, "term": term}, idempotent=True)

    def leader(self, name: str) -> Leadership:
        """Who leads ``name`` now (``leader`` None when nobody does)."""
        return Leadership.from_json(self._get("elections", name))

    def campaign(
        self,
        name: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        candidate: Optional[str] = None,
    ) -> Leader:
        """Becomes leader, waiting up to ``wait`` seconds, and stays leader until resigning::

            with client.campaign("scheduler", ttl=10, wait=60) as leader:
                while not leader.lost.wait(1.0):
                    schedule(term=leader.term)

        Raises:
            LockHeld: another candidate still leads after ``wait``.
        """
        candidate = candidate or default_owner()
        sent = time.monotonic()
        grant = self.campaign_once(name, candidate, ttl, wait)
        return Leader(self, grant, ttl, sent, candidate)

    def try_campaign(self, name: str, ttl: float = 30.0, candidate: Optional[str] = None) -> Optional[Leader]:
        """Like :meth:`campaign` with no wait, but None when another candidate leads."""
        try:
            return self.campaign(name, ttl=ttl, wait=0.0, candidate=candidate)
        except Busy:
            return None

    def observe(
        self, name: str, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> Iterator[Leadership]:
        """Yields the leadership of ``name`` now, then once per change of leader.

        Every new term is seen, and a vacancy (``leader`` None) when the
        leader resigns or expires. Stops (returns) after ``timeout`` seconds
        (None: never); closing the generator or leaving a ``for`` loop closes
        the stream.

        Raises:
            Unreachable: nothing arrived for ``idle_timeout`` seconds (the
                broker sends a keep-alive every 15 s), or the stream broke.
        """
        end = None if timeout is None else time.monotonic() + timeout
        response = self._http.open(
            "GET",
            f"/v1/elections/{quote_key(name)}/observe",
            idempotent=True,
            read_timeout=_left(end, idle_timeout),
        )
        sock = getattr(response, "lockbroker_socket", None)

        def readline() -> Optional[bytes]:
            left = _left(end, idle_timeout)
            if left <= 0:
                return None
            if sock is not None:
                sock.settimeout(left)
            try:
                return response.readline()
            except socket.timeout:
                if end is not None and time.monotonic() >= end:
                    return None
                raise Unreachable(None, "unreachable", f"no event for {idle_timeout} s on {name!r}") from None
            except OSError as err:
                raise Unreachable(None, "unreachable", f"the observe stream broke: {err}") from err

        try:
            for event, data in events(readline):
                if event == "leader":
                    yield Leadership.from_json(data)
        finally:
            response.close()

    # -- requests ----------------------------------------------------------

    def _post(self, kind: str, key: str, action: str, body: Body, *, idempotent: bool, **kw: Any):
        return self._http.request("POST", f"/v1/{kind}/{quote_key(key)}/{action}", body, idempotent=idempotent, **kw)

    def _get(self, kind: str, key: str) -> Dict[str, Any]:
        return self._http.request("GET", f"/v1/{kind}/{quote_key(key)}", idempotent=True)

    def _acquire_call(self, kind: str, key: str, action: str, body: Dict[str, Any], wait: float) -> Dict[str, Any]:
        # Not idempotent: a repeat by the same owner would re-enter. A try
        # after a 503 waits only for what is left of `wait`.
        ends = time.monotonic() + max(0.0, wait)

        def body_now() -> Dict[str, Any]:
            return dict(body, wait_ms=_ms(max(0.0, ends - time.monotonic())))

        return self._post(kind, key, action, body_now, idempotent=False, read_timeout=self.timeout + max(0.0, wait))

    def _renew_multi_once(self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float) -> Any:
        """One multi-lock renewal for a :class:`MultiLease`'s renewal thread."""
        body = {"owner": owner, "ttl_ms": _ms(ttl), "locks": locks}
        return self._http.request(
            "POST", "/v1/multilock/renew", body, idempotent=True, read_timeout=read_timeout, retries=0
        )

    def _renew_once(self, kind: str, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float) -> Any:
        """One renewal for a handle's renewal thread, which does its own retrying against the lease's deadline."""
        body = dict(ids, ttl_ms=_ms(ttl))
        return self._post(kind, key, "renew", body, idempotent=True, read_timeout=read_timeout, retries=0)


def _left(end: Optional[float], idle_timeout: float) -> float:
    """Seconds to wait for the next line: the idle timeout, or less if the overall timeout comes first."""
    if end is None:
        return idle_timeout
    return min(idle_timeout, end - time.monotonic())
