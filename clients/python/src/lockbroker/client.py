"""The client: one object per broker and tenant, safe to share between threads.

Every kind of lease is one :class:`~lockbroker.kinds.Kind` (``kinds.py``):
``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, each with ``acquire``/``renew``/``release``/
``status``/``list`` (and ``history``) and the guards ``hold``/``try_hold``.
The client adds the guards by their usual names (``lock``, ``semaphore``,
``read_lock``, ``campaign``, ..., shared with the async client in
``guards.py``), sessions (``session``, ``sessions``), multi-locks, the admin
force-release and the event stream.

Durations are seconds (floats), as elsewhere in Python; the broker's
``*_ms`` fields are filled from them. What the client is built from, and its
multi-lock plans, are shared with the async client (``clientbase.py``).
"""

from typing import Any, Dict, List, Optional

from . import acquiring, specs
from .clientbase import ClientBase
from .events import EventStream
from .guards import GuardNames
from .handles import MultiLease
from .kinds import Elections, Locks, RwLocks, Semaphores, default_owner
from .models import ForceReleased, MultiLockGrant, MultiLockReleased
from .sessions import Session, Sessions
from .specs import MAX_WAIT
from .transport import Transport

__all__ = ["MAX_WAIT", "Client", "default_owner"]


class Client(GuardNames, ClientBase):
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

    _transport_type = Transport
    _kind_types = (Locks, Semaphores, RwLocks, Elections)
    _multi_lease_type = MultiLease
    _session_type = Session
    _sessions_type = Sessions
    _http: Transport
    sessions: Sessions
    locks: Locks
    semaphores: Semaphores
    rwlocks: RwLocks
    elections: Elections

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

    # -- sessions --------------------------------------------------------------

    def session(self, ttl: float = 15.0, name: Optional[str] = None, lock_delay: Optional[float] = None) -> Session:
        """Opens a session and keeps it alive (a keepalive every third of ``ttl``, in a background
        thread) until it is closed, at the end of its ``with`` block::

            with client.session(ttl=15) as session:
                with session.lock("job-a") as a, session.lock("job-b") as b:
                    run_job(fencing_tokens=(a.token, b.token))

        Leases taken in it (``session.lock``, ``session.semaphore``, ``session.read_lock``,
        ``session.write_lock``, ``session.multilock``, ``session.campaign``, ...) live as long as
        it does, with no renewals of their own: one keepalive keeps them all, and
        ``session.lost`` is their one lost signal.
        ``ttl``: 1 to 3600 seconds; ``name``: for listings (``client.sessions.list``);
        ``lock_delay``: how long its keys stay ungranted after it *expires* (not after a close).

        Raises:
            ValueError: ``ttl`` out of range (nothing sent).
            QuotaExceeded: the tenant has its most sessions open (after the client's retries).
        """
        return self._http.run(self._opening(ttl, name, lock_delay))

    # -- multi-locks -----------------------------------------------------------

    def acquire_multi(
        self, keys: List[str], owner: str, ttl: float = 30.0, wait: float = 0.0, *, session: Optional[str] = None
    ) -> MultiLockGrant:
        """Takes every lock of ``keys`` for ``owner``, all or none (no renewal: see :meth:`multilock`).
        ``session``: a session's id to hold them in, in place of ``ttl`` (see :meth:`session`).

        Raises:
            LockHeld: some key stayed busy for ``wait`` seconds (none was granted).
            BadRequest: no keys, more than 64, or two naming one lock.
            OutcomeUnknown: the connection broke after the acquire was sent.
            SessionNotFound: ``session`` has ended (nothing was granted).
            DeadlockError: waiting would close a cycle of sessions (refused at once, nothing granted).
        """
        return self._http.call(specs.acquire_multi(keys, owner, ttl, wait, session))

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
        return self._http.run(self._multilocking(keys, ttl, wait, owner))

    def try_multilock(self, keys: List[str], ttl: float = 30.0, owner: Optional[str] = None) -> Optional[MultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        return self._http.run(acquiring.trying(self._multilocking(keys, ttl, 0.0, owner)))

    def _renew_multi_once(
        self, owner: str, locks: List[Dict[str, Any]], ttl: float, read_timeout: float, deadline: float
    ) -> Any:
        """One multi-lock renewal, for a :class:`MultiLease`'s renewal thread (no retries)."""
        return self._http.call(self._multi_renewal(owner, locks, ttl, read_timeout, deadline))

    def _release_multi_own(self, owner: str, locks: List[Dict[str, Any]]) -> Any:
        """A :class:`MultiLease`'s release, within a deadline of its own."""
        return self._http.call(self._own_multi_release(owner, locks))

    # -- admin -----------------------------------------------------------------

    def force_release(self, tenant: str, key: str) -> ForceReleased:
        """Ends the live lease of ``tenant``'s lock ``key`` (this client's key must be the admin token).

        Raises:
            NotFound: no such tenant, or nobody holds the lock.
        """
        return self._http.call(specs.force_release(tenant, key))
