"""The sync client's kinds: ``client.locks``, ``client.semaphores``, ``client.rwlocks``,
``client.elections``, each sending the calls of its :class:`~lockbroker.specs.Spec`.

A :class:`Kind` has:

- plain calls, one request each, returning the typed answer
  (``models.py``): ``acquire``, ``renew``, ``release``, ``status``,
  ``history``, and ``list`` (every page of the listing);
- guards: ``hold`` and ``try_hold`` return a handle (``handles.py``) that
  renews in the background and releases on ``with`` exit.

Every acquire takes the same terms: ``ttl`` and ``wait`` (seconds) and
``priority``; a kind adds the fields its acquire needs (a semaphore's
``permits``, a rwlock's ``mode``) and the calls of its own (``validate``,
``observe``).

What a kind sends, and the plans of what takes more than one call, are
shared with the async client (``kindbase.py``); here each is sent, blocking.
"""

from typing import Any, Dict, Generic, Iterator, List, Optional, Type, TypeVar

from . import models
from .acquiring import default_owner  # noqa: F401  (here since 0.1: ``lockbroker.kinds.default_owner``)
from .handles import Leader, Lease, Permit, RwLease
from .kindbase import G, KindBase, S
from .specs import ELECTIONS, LOCKS, MAX_WAIT, PAGE_SIZE, RWLOCKS, SEMAPHORES
from .transport import Transport

L = TypeVar("L", bound=Lease)


class Kind(KindBase, Generic[G, S, L]):
    """The calls every kind shares. ``client.locks`` is one, ``client.semaphores`` another, ..."""

    handle_type: Type[Lease] = Lease

    def __init__(self, client: Any, http: Transport) -> None:
        self.client = client
        self._http = http

    # -- plain calls -------------------------------------------------------

    def acquire(
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
        renewal (see :meth:`hold`). ``fields``: what this kind's acquire needs besides.
        ``session``: a session's id to hold the lease in, in place of ``ttl`` (every kind; see
        :meth:`Client.session`, which keeps one alive).

        Raises:
            Busy (``LockHeld``, ``SemaphoreFull``): taken by others after ``wait``.
            OutcomeUnknown: the connection broke after the acquire was sent; it
                may have been granted (look at :meth:`status` for ``owner``).
            SessionNotFound: ``session`` has ended (nothing was granted).
            DeadlockError: waiting would close a cycle of sessions (refused at once, nothing granted).
            BadRequest, InvalidKey, Unauthenticated, Unavailable, ...: see ``errors``.
        """
        return self._http.call(self._acquisition(key, owner, ttl, wait, priority, fields, session))

    def renew(self, key: str, owner: str, token: int, ttl: float = 30.0, **ids: Any) -> G:
        """Extends a held lease to ``ttl`` seconds from now (``ids``: a semaphore's ``slot``).

        Raises:
            LeaseLost: it expired, or is not ``owner``'s with ``token``.
        """
        return self._http.call(self.spec.renew(key, self.spec.ids(owner, token, ids), ttl))

    def release(self, key: str, owner: str, token: int, **ids: Any) -> Any:
        """Gives the lease (one hold of a re-entered lock) back; :class:`Released` but for an election.

        Raises:
            LeaseLost: ``token`` is not ``owner``'s live lease.
        """
        return self._http.call(self.spec.release(key, self.spec.ids(owner, token, ids)))

    def status(self, key: str) -> S:
        """Who holds ``key`` now, and how many wait."""
        return self._http.call(self.spec.status(key))

    def list(self, prefix: str = "", limit: Optional[int] = None, page_size: int = PAGE_SIZE) -> Iterator[S]:
        """Yields the live ones whose storage key starts with ``prefix`` (bytes, literally), in
        storage-key order, at most ``limit`` (None: all), fetching ``page_size`` (1 to 1000) at
        a time and following each page's cursor. One live for the whole scan is yielded exactly
        once; one granted or released meanwhile may or may not be.
        """
        yield from self._http.iterate(self._listing(prefix, limit, page_size))

    # -- guards --------------------------------------------------------------

    def hold(
        self,
        key: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
        **fields: Any,
    ) -> L:
        """Acquires ``key``, waiting up to ``wait`` seconds, and keeps it renewed every third of
        ``ttl`` until released; use it in a ``with`` block, which releases it at the end (also on
        an exception). ``owner`` defaults to a new ``host:pid:uuid``.

        An acquire interrupted after it was sent (``KeyboardInterrupt``, an
        exception raised by a signal handler, a broken connection) leaves no
        lease behind: with its own owner, the guard looks the key up and
        releases what was granted meanwhile, then lets the exception pass.

        Raises:
            Busy: still taken by others after ``wait``.
            OutcomeUnknown: the connection broke after the acquire was sent.
        """
        return self._http.run(self._holding(key, ttl, wait, owner, priority, fields))

    def try_hold(
        self, key: str, ttl: float = 30.0, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[L]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        return self._http.run(self._trying(key, ttl, owner, priority, fields))

    # -- what handles use ----------------------------------------------------

    def renew_once(self, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float, deadline: float) -> Any:
        """One renewal for a handle's renewal thread, which does its own retrying (``clock.py``)."""
        return self._http.call(self._renewal(key, ids, ttl, read_timeout, deadline))

    def release_ids(self, key: str, ids: Dict[str, Any]) -> Any:
        """Releases the lease ``ids`` names, within a deadline of its own (not the caller's)."""
        return self._http.call(self._own_release(key, ids))


class _Audited(Kind[G, S, L]):
    """A kind whose changes the broker records (locks, semaphores, rwlocks)."""

    def history(self, key: str, limit: Optional[int] = None) -> List[models.LockEvent]:
        """The latest events of ``key`` (grants, releases, expiries, handoffs, force-releases),
        newest first; ``limit`` 1 to 1000, None for the broker's default (100).

        Raises:
            BadRequest: ``limit`` out of range.
        """
        return self._http.call(self.spec.history(key, limit))


class Locks(_Audited[models.LockGrant, models.LockStatus, Lease]):
    """``client.locks``: exclusive locks. The same owner acquiring again re-enters (same token,
    ``hold_count`` + 1); ``release`` gives one hold back."""

    spec, handle_type = LOCKS, Lease

    def validate(self, key: str, token: int) -> models.Validity:
        """Whether ``token`` is the live grant of ``key`` now (a sequencer check; may be stale on arrival)."""
        return self._http.call(LOCKS.validate(key, token))


class Semaphores(_Audited[models.SemaphoreGrant, models.SemaphoreStatus, Permit]):
    """``client.semaphores``: up to ``permits`` holders at once, each in its own slot.

    ``acquire(key, owner, permits=3)``; ``renew``/``release`` also take the
    ``slot``. An acquire with another size than the semaphore's raises
    ``PermitsMismatch``; a full one ``SemaphoreFull``.
    """

    spec, handle_type = SEMAPHORES, Permit


class RwLocks(_Audited[models.RwGrant, models.RwLockStatus, RwLease]):
    """``client.rwlocks``: many readers or one writer, ``acquire(key, owner, mode="read")``.

    A queued writer blocks new readers. The same owner asking again for the
    mode it holds gets its lease back renewed (same token).
    """

    spec, handle_type = RWLOCKS, RwLease


class Elections(Kind[models.Term, models.Leadership, Leader]):
    """``client.elections``: one leader at a time. ``acquire`` campaigns (the owner is the
    candidate, the token the term), ``release`` resigns; a leader campaigning again stays leader
    of the same term."""

    spec, handle_type = ELECTIONS, Leader

    def leader(self, name: str) -> models.Leadership:
        """Who leads ``name`` now (``leader`` None when nobody does): :meth:`status`."""
        return self.status(name)

    def observe(
        self, name: str, timeout: Optional[float] = None, idle_timeout: float = 45.0
    ) -> Iterator[models.Leadership]:
        """Yields the leadership of ``name`` now, then once per change of leader.

        Every new term is seen, and a vacancy (``leader`` None) when the
        leader resigns or expires. When the stream breaks, the broker ends
        it, or nothing (not even the broker's keep-alive, every 15 s) arrives
        for ``idle_timeout`` seconds, it connects again and goes on from the
        leadership then (a change that came and went meanwhile is missed;
        none is yielded twice). Stops (returns) after ``timeout`` seconds
        (None: never); closing the generator or leaving a ``for`` loop
        closes the stream.

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        yield from self._http.iterate(self._observing(name, timeout, idle_timeout))
