"""The client: one object per broker and tenant, safe to share between threads.

Every kind of lease is one :class:`~lockbroker.kinds.Kind` (``kinds.py``):
``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, each with ``acquire``/``renew``/``release``/
``status``/``list`` (and ``history``) and the guards ``hold``/``try_hold``.
The client adds the guards by their usual names (``lock``, ``semaphore``,
``read_lock``, ``campaign``, ..., shared with the async client in
``guards.py``), multi-locks, the admin force-release and the event stream.

Durations are seconds (floats), as elsewhere in Python; the broker's
``*_ms`` fields are filled from them.
"""

import logging
import ssl
import time
from typing import Any, Dict, List, Optional

from . import specs
from .errors import Busy, LockbrokerError, OutcomeUnknown
from .events import EventStream
from .guards import GuardNames
from .handles import MultiLease
from .kinds import Elections, Locks, RwLocks, Semaphores, default_owner
from .models import ForceReleased, MultiLockGrant, MultiLockReleased
from .options import Options
from .specs import MAX_WAIT, own_deadline
from .transport import Transport

log = logging.getLogger("lockbroker")

__all__ = ["MAX_WAIT", "Client", "default_owner"]


class Client(GuardNames):
    """A connection to one broker as one tenant.

    The guards (``guards.py``) return the held lease, acquired, renewed in a
    background thread, and released at the end of a ``with`` block::

        with client.lock("nightly", ttl=30, wait=10) as lease:
            run_job(fencing_token=lease.token)

        with client.campaign("scheduler", ttl=10, wait=60) as leader:
            while not leader.lost.wait(1.0):
                schedule(term=leader.term)

    Args:
        url: the broker's base URL; default ``$LOCKBROKER_URL``.
        api_key: the tenant's API key (the admin token for :meth:`force_release`);
            default ``$LOCKBROKER_API_KEY``.
        timeout: seconds to connect and to wait for each answer (a waiting
            acquire adds its ``wait``).
        retries: how often a ``503``, a connection failure or a ``429``
            (``rate_limited``, ``quota_exceeded``) is tried again, with
            exponential backoff from ``backoff`` up to ``max_backoff``
            seconds, jittered, and at least the broker's ``retry_after_ms``.
            Other ``4xx`` answers are never retried; an acquire whose
            connection broke after it was sent is not retried either (it may
            have been granted: ``OutcomeUnknown``). ``lockbroker.deadline``
            bounds it all.
        ca_file, client_cert, client_key: TLS for an ``https`` URL (PEM
            files): the CAs trusted for the broker's certificate (default:
            the system's), and this client's certificate and key for mutual
            TLS; default ``$LOCKBROKER_CA_FILE``, ``$LOCKBROKER_CLIENT_CERT``,
            ``$LOCKBROKER_CLIENT_KEY``.
        ssl_context: an ``ssl.SSLContext`` of your own, instead of those three.

    Raises:
        ValueError: no URL given and ``LOCKBROKER_URL`` unset, not http(s),
            or TLS files that cannot be loaded.
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
        self._http = Transport(options)
        self.locks = Locks(self, self._http)
        self.semaphores = Semaphores(self, self._http)
        self.rwlocks = RwLocks(self, self._http)
        self.elections = Elections(self, self._http)

    @property
    def url(self) -> str:
        return self._http.url

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

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
            OutcomeUnknown: the connection broke after the acquire was sent.
        """
        return self._http.call(specs.acquire_multi(keys, owner, ttl, wait))

    def renew_multi(self, owner: str, locks: List[Dict[str, Any]], ttl: float = 30.0) -> MultiLockGrant:
        """Extends every lease of ``locks`` (``[{"key", "token"}]``), all or none. Raises ``LeaseLost``."""
        return self._http.call(specs.renew_multi(owner, locks, ttl))

    def release_multi(self, owner: str, locks: List[Dict[str, Any]]) -> List[MultiLockReleased]:
        """Releases every key still held by its token; ``lost`` marks the others. Raises ``LeaseLost`` if none was."""
        return self._http.call(specs.release_multi(owner, locks))

    def multilock(self, keys: List[str], ttl: float = 30.0, wait: float = MAX_WAIT, owner: Optional[str] = None) -> MultiLease:
        """Takes every lock of ``keys`` at once, waiting up to ``wait`` seconds, and keeps them renewed::

            with client.multilock(["account-1", "account-2"], ttl=30, wait=10) as held:
                transfer(fence=held.tokens)

        An acquire interrupted after it was sent leaves nothing behind, as
        for :meth:`Kind.hold`.

        Raises:
            LockHeld: some key stayed busy after ``wait`` (none is held).
        """
        fresh = owner is None
        owner = owner or default_owner()
        sent = time.monotonic()
        try:
            grant = self.acquire_multi(keys, owner, ttl, wait)
        except LockbrokerError as err:
            if fresh and isinstance(err, OutcomeUnknown):
                self._give_back_multi(keys, owner)
            raise
        except BaseException:
            if fresh:
                self._give_back_multi(keys, owner)
            raise
        return MultiLease(self, grant, ttl, sent)

    def try_multilock(self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None) -> Optional[MultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        try:
            return self.multilock(keys, ttl=ttl, wait=0.0, owner=owner)
        except Busy:
            return None

    def _renew_multi_once(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float, deadline: float
    ) -> Any:
        """One multi-lock renewal, for a :class:`MultiLease`'s renewal thread (no retries)."""
        return self._http.call(specs.renew_multi(owner, locks, ttl, read_timeout=read_timeout, retries=0, deadline=deadline))

    def _release_multi_own(self, owner: str, locks: List[Dict[str, Any]]) -> Any:
        """A :class:`MultiLease`'s release, within a deadline of its own."""
        return self._http.call(specs.release_multi(owner, locks, deadline=own_deadline(self.timeout)))

    def _give_back_multi(self, keys: List[str], owner: str) -> None:
        """After a multi-lock acquire whose answer this process did not see: releases the keys
        ``owner`` holds now, if any (best effort)."""
        deadline = own_deadline(self.timeout)
        try:
            statuses = [self._http.call(specs.LOCKS.status(key, deadline=deadline)) for key in keys]
            held = specs.multi_held_by(statuses, owner)
            if held:
                self._http.call(specs.release_multi(owner, held, deadline=deadline))
        except LockbrokerError as err:
            log.warning("lockbroker: could not give back an interrupted multi-lock (it ends by its TTL): %s", err)

    # -- admin -----------------------------------------------------------------

    def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token).

        Raises:
            NotFound: no such tenant, or nobody holds the lock.
        """
        return self._http.call(specs.force_release(tenant, key))
