"""What a session is to both clients: the parts of their session handles that do not wait.

A session (``POST /v1/sessions``) keeps many leases alive with one keepalive: the leases held in
it have no TTL or renewals of their own and end with it. So the client keeps the *session* alive
with the machinery it keeps a lease alive with: the same renewal loop (``renewing.py``, a thread
in the sync client, a task in the async one), whose one call is the keepalive, on the same
:class:`~lockbroker.clock.LeaseClock` rules: a keepalive every third of the TTL, and the session
lost before TTL has passed since the last confirmed keepalive was sent, or at once when the
broker answers ``session_not_found``.

The session has one ``lost`` signal; when it fires, every lease still held in it reports lost
too (each lease's own ``lost``), since they ended with it. A lease of the session is a held
handle like any other (``heldbase.HeldBase``: fields, ``release`` once, ``raise_if_lost``) whose
"renewer" is :class:`InSession`, a view of the session's keepalives; the front ends make it the
kind's own handle type too (a permit held in a session is a ``Permit``, with its ``slot``).

The broker holds every kind in sessions: locks, semaphore permits, rwlock read and write leases,
multi-locks and elections' leaderships. Here, once for both front ends (``sessions.py``,
``aio/sessions.py``):

- :class:`SessionBase`: the session's fields, its leases, the lost fan-out, and as plans
  (``steps.py``) a lease's acquire in it (of any kind, or a multi-lock) and the close;
- :class:`InSessionHeld`: what a handle held in a session adds to a held handle;
  :class:`SessionLeaseBase` a lease of one key held in a session, :class:`SessionMultiLeaseBase`
  a multi-lock;
- :func:`opening`: opening one, as a plan.
"""

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar

from . import acquiring, sessionspecs
from .clock import LeaseClock
from .errors import LeaseLost, LockbrokerError, SessionNotFound
from .exchange import Exchange
from .heldbase import MultiFields
from .models import Grant, MultiLockGrant, SessionClosed, SessionInfo
from .renewing import Renewals
from .specs import own_deadline
from .steps import Invoke, Plan
from .wire import Call

log = logging.getLogger("lockbroker")

T = TypeVar("T")


def opening(
    exchange: Exchange, ttl: float, name: Optional[str], lock_delay: Optional[float], make: Callable[[SessionInfo, float], T]
) -> Plan[T]:
    """Opens a session and gives the handle ``make`` makes of it, with when the open was sent (the
    session lives at least until then plus its TTL, as a lease does from its acquire's send).

    Raises:
        ValueError: ``ttl`` out of the broker's range (1 s to 1 h), before anything is sent.
    """
    sessionspecs.check_ttl(ttl)
    call = sessionspecs.open_session(ttl, name, lock_delay)
    sent = time.monotonic()
    info: SessionInfo = yield from exchange.call(call)
    return make(info, sent)


class FanOut:
    """The ``lost`` the session's keepalive loop sets (``Renewals`` only sets it): sets the
    session's ``lost``, then that of every lease still held in it, which ended with it."""

    def __init__(self, session: "SessionBase") -> None:
        self._session = session

    def set(self) -> None:
        self._session._lose()

    def is_set(self) -> bool:
        return bool(self._session.lost.is_set())


class InSession:
    """Stands in for a lease's renewer when the lease is held in a session: it lives by the
    session's keepalives, so its clock, count and failure are the session's. Stopping it (the
    lease's release) only takes the lease off the session's list: the session goes on for the
    others. ``stop`` is the front end's (a function, or a coroutine function)."""

    def __init__(self, keeper: Renewals, stop: Callable[[], Any]) -> None:
        self._keeper = keeper
        self.stop = stop

    @property
    def clock(self) -> LeaseClock:
        return self._keeper.clock

    @property
    def renewals(self) -> int:
        return self._keeper.renewals

    @property
    def last_error(self) -> Optional[LockbrokerError]:
        return self._keeper.last_error


class SessionBase:
    """A session this process keeps alive (the front ends give ``lost``, ``_keeper``, the lease
    type and ``_detach``, and start the keepalives).

    Attributes:
        id: the session's id (what an acquire names as ``session``).
        name: its name, or None.
        ttl: seconds it lives past each keepalive.
        info: the broker's answer to the open (:class:`SessionInfo`).
    """

    lost: Any
    _keeper: Renewals
    #: The front end's handle of a lease held in a session, by the kind's noun (``"lock"``,
    #: ``"semaphore"``, ``"rwlock"``, ``"election"``): made of ``(kind, grant, session)``.
    _lease_types: Mapping[str, Callable[[Any, Grant, Any], Any]]
    #: The front end's handle of a multi-lock held in a session: ``(client, grant, session)``.
    _multi_lease_type: Callable[[Any, MultiLockGrant, Any], Any]

    def _begin(self, client: Any, info: SessionInfo) -> None:
        """Set up by the front end's ``__init__``, once ``lost`` is made, before keepalives start."""
        self.client = client
        self.info = info
        self.id: str = info.id
        self.name: Optional[str] = info.name
        self.ttl: float = info.ttl_ms / 1000.0
        self._leases: List[Any] = []
        self._closed = False
        self._guard = threading.Lock()  # the keepalive thread fans out while others add leases

    def _clock(self, sent: float) -> LeaseClock:
        return LeaseClock(self.ttl, sent, self.client.timeout, self.client.backoff)

    # -- what it tells -------------------------------------------------------------------

    @property
    def held_until(self) -> float:
        """The ``time.monotonic()`` instant until which the session (and every lease in it) surely
        lives: when its last confirmed keepalive (or its open) was sent, plus the TTL."""
        return self._keeper.clock.held_until

    @property
    def keepalives(self) -> int:
        """How many keepalives the broker has confirmed so far."""
        return self._keeper.renewals

    @property
    def lost_reason(self) -> Optional[LockbrokerError]:
        """The failure that made the session lost (``SessionNotFound`` when it ended at the broker;
        ``Unavailable`` when no keepalive was confirmed in time), None while it is kept."""
        return self._keeper.last_error

    @property
    def leases(self) -> List[Any]:
        """The leases held in it by this handle and not released yet."""
        with self._guard:
            return list(self._leases)

    def raise_if_lost(self) -> None:
        """Raises :class:`LeaseLost` if the session was lost: a check between steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(None, "lease_lost", f"the session was lost: {self.lost_reason}")

    # -- keepalives and the lost signal --------------------------------------------------

    def _keepalive(self, read_timeout: float, deadline: float) -> Call:
        """One keepalive, for the session's renewal loop (no retries: it does its own)."""
        return sessionspecs.keepalive(self.id, read_timeout=read_timeout, retries=0, deadline=deadline)

    def _lose(self) -> None:
        """The session is lost: its signal fires once, and every lease still in it is lost with it."""
        with self._guard:
            leases = list(self._leases)
        self.lost.set()
        for lease in leases:
            lease.lost.set()

    # -- leases --------------------------------------------------------------------------

    def _holding(self, kind: Any, key: str, wait: float, owner: Optional[str], priority: int, fields: Dict[str, Any]) -> Plan[Any]:
        """A lease of ``kind`` (``client.locks``, ``client.semaphores``, ...) held in this session
        (``acquiring.hold`` with the session in place of a TTL: given back the same way when
        interrupted), as the front end's handle of that kind held in a session.

        The owner defaults to a new ``host:pid:uuid`` per call, as for every guard, rather than to
        the session's id as the broker's does: two blocks of this process that take one key in
        one session then wait for each other instead of silently re-entering each other's lock,
        and an interrupted acquire can tell its own grant from an earlier one.

        Raises:
            TypeError: ``kind`` is none of the client's kinds (before anything is sent).
        """
        make = self._lease_type_of(kind)
        exchange = self.client._http.exchange
        return acquiring.hold(
            exchange, kind.spec, key, self.ttl, wait, owner, priority, fields, lambda grant, _ttl, _sent: self._held(make(kind, grant, self)), self.id
        )

    def _lease_type_of(self, kind: Any) -> Callable[[Any, Grant, Any], Any]:
        """The front end's handle of a lease of ``kind`` held in a session.

        Raises:
            TypeError: ``kind`` is none of the client's kinds.
        """
        make = self._lease_types.get(getattr(getattr(kind, "spec", None), "noun", ""))
        if make is None:
            raise TypeError(f"a session holds leases of the client's kinds, not of {kind!r}")
        return make

    def _multilocking(self, keys: List[str], wait: float, owner: Optional[str]) -> Plan[Any]:
        """Every lock of ``keys`` held at once in this session (``acquiring.hold_multi`` with the
        session in place of a TTL), as the front end's multi-lock held in a session; the owner
        defaults to a new ``host:pid:uuid``, as for :meth:`_holding`."""
        exchange = self.client._http.exchange
        make = self._multi_lease_type
        return acquiring.hold_multi(
            exchange, keys, self.ttl, wait, owner, lambda grant, _ttl, _sent: self._held(make(self.client, grant, self)), self.id
        )

    def _held(self, lease: Any) -> Any:
        """Puts a lease just granted in this session on its list, and gives it."""
        with self._guard:
            self._leases.append(lease)
        if self.lost.is_set():  # granted while the session was being given up: it ends with it
            lease.lost.set()
        return lease

    def _forget(self, lease: Any) -> None:
        """Takes a released lease off the list (what its :class:`InSession` stop does)."""
        with self._guard:
            if lease in self._leases:
                self._leases.remove(lease)

    # -- the end -------------------------------------------------------------------------

    def _closing(self) -> Plan[Optional[SessionClosed]]:
        """The close (once): stops the keepalives, then ends the session at the broker, which
        releases every lease in it; those handles count as released (their ``release`` does
        nothing). Never raises a broker error: a session already ended (lost, or closed from
        outside) has nothing left to release; one that cannot be reached ends by its TTL, and the
        failure is logged on the ``lockbroker`` logger."""
        with self._guard:
            if self._closed:
                return None
            self._closed = True
            leases, self._leases = self._leases, []
        for lease in leases:
            lease._ended_with_session()
        yield Invoke(self._keeper.stop)
        try:
            return (yield from self.client._http.exchange.call(sessionspecs.close(self.id, deadline=own_deadline(self.client.timeout))))
        except SessionNotFound:
            return None
        except LockbrokerError as err:
            log.warning("lockbroker: closing session %s failed (it ends by its TTL): %s", self.id, err)
            return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, ttl={self.ttl}, leases={len(self._leases)}, lost={self.lost.is_set()})"


class InSessionHeld:
    """What something held in a session is besides a held handle (the front end's
    ``HeldBase``): its ``session``, and a ``lost`` of the session's kind of event. It is not
    renewed: the session's keepalives keep it (:class:`InSession`); ``lost`` fires when the
    session is lost (or its release finds it gone). Its release gives it back alone."""

    _guard: threading.Lock
    _released: bool

    def _hold_in(self, session: SessionBase, what: str, release: Callable[[], Any]) -> None:
        """Set up by ``__init__``, the fields set: held in ``session``, released by ``release``."""
        self.session = session
        self.lost = type(session.lost)()
        self._begin(  # type: ignore[attr-defined]  # the front end's HeldBase
            f"{what} session={session.id!r}",
            release,
            InSession(session._keeper, lambda: session._detach(self)),  # type: ignore[attr-defined]
        )

    def _ended_with_session(self) -> None:
        """The session was closed, and this lease with it: nothing is left to release."""
        with self._guard:
            self._released = True


class SessionLeaseBase(InSessionHeld):
    """A lease of one key of any kind held in a session: ``key``, ``owner``, ``token`` (the
    fencing token) and ``grant`` as any lease's, and its ``session``; released by its kind."""

    def __init__(self, kind: Any, grant: Grant, session: SessionBase) -> None:
        self.grant = grant
        self.key: str = grant.key
        self.owner: str = grant.owner
        self.token: int = grant.token
        ids = kind.spec.lease_ids(grant)
        self._hold_in(session, kind.spec.describe(grant), lambda: kind.release_ids(grant.key, ids))


class SessionMultiLeaseBase(MultiFields, InSessionHeld):
    """A multi-lock held in a session: ``owner``, ``keys``, ``tokens`` and ``grant`` as any
    multi-lock's (``heldbase.MultiFields``), and its ``session``; released as one by its
    ``client``."""

    def __init__(self, client: Any, grant: MultiLockGrant, session: SessionBase) -> None:
        owner, held = grant.owner, self._take(grant)
        self._hold_in(session, self._described(), lambda: client._release_multi_own(owner, held))
