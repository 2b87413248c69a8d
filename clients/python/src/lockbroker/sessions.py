"""Sessions in the sync client: :class:`Session` (what ``client.session(ttl)`` gives: kept alive
by a thread, closed at the end of a ``with`` block), the leases held in it (:class:`SessionLease`
a lock's, :class:`SessionPermit`, :class:`SessionRwLease`, :class:`SessionLeader`,
:class:`SessionMultiLease`), and :class:`Sessions` (``client.sessions``: the plain calls).

What does not wait (the fields, the lost fan-out, the plans of an acquire in the session and of
the close) is shared with the async client, in ``sessionbase.py``, and so are the guard names
(``guards.SessionGuardNames``); here are the thread and the ``with``.
"""

import threading
from typing import Any, Iterator, List, Optional

from . import acquiring, listing, sessionspecs
from .guards import SessionGuardNames
from .handles import Leader, Lease, MultiLease, Permit, RwLease
from .models import SessionClosed, SessionInfo, SessionKeepalive, SessionStatus
from .renewal import Renewer
from .sessionbase import FanOut, SessionBase, SessionLeaseBase, SessionMultiLeaseBase
from .specs import MAX_WAIT, PAGE_SIZE
from .transport import Transport


class SessionLease(SessionLeaseBase, Lease):
    """A lease held in a session (a lock's is exactly this; the other kinds' add their own
    fields): ``key``, ``owner``, ``token``, ``grant``, ``session``. Not renewed on its own: the
    session's keepalives keep it.

    Attributes:
        lost: a ``threading.Event``, set when the session is lost (then every lease of it is), or
            when its release finds it gone.

    ``release()`` gives it back now and leaves the session's other leases held; the end of its
    ``with`` block does too. Closing the session releases whatever is left.
    """


class SessionPermit(SessionLease, Permit):
    """A semaphore permit held in a session: a :class:`Permit` (``slot``, its own ``token``)."""


class SessionRwLease(SessionLease, RwLease):
    """A read or write lease of a rwlock held in a session: a :class:`RwLease` (``mode``)."""


class SessionLeader(SessionLease, Leader):
    """Leadership of an election held in a session: a :class:`Leader` (``name``, ``candidate``,
    ``term``, ``resign()``); it lasts as long as the session, or until resigning."""


class SessionMultiLease(SessionMultiLeaseBase, MultiLease):
    """Several locks held together in a session: a :class:`MultiLease` (``owner``, ``keys``,
    ``tokens``) released as one, by ``release()`` or the end of its ``with`` block; ``lost`` as
    a :class:`SessionLease`'s."""


class Session(SessionGuardNames, SessionBase):
    """A session this process keeps alive: a keepalive every third of its TTL in a background
    thread, until :meth:`close` (the end of its ``with`` block)::

        with client.session(ttl=15) as session:
            a = session.lock("job-a")
            pool = session.semaphore("workers", permits=4)
            while not session.lost.wait(1.0):
                work(a.token, pool.token)

    Its guards are the client's, by the same names and returning the same handle types, without
    ``ttl`` (``guards.SessionGuardNames``): ``lock``, ``semaphore``, ``read_lock``,
    ``write_lock``, ``rwlock``, ``campaign`` and their ``try_`` forms, and :meth:`multilock`.

    Attributes:
        lost: a ``threading.Event``, set once when the session can no longer be kept alive (the
            broker answered a keepalive ``session_not_found``, or none was confirmed before TTL
            could have passed since the last one was sent). Every lease of it is lost too: others
            may hold those keys from then on.
    """

    _lease_types = {"lock": SessionLease, "semaphore": SessionPermit, "rwlock": SessionRwLease, "election": SessionLeader}
    _multi_lease_type = SessionMultiLease

    def __init__(self, client: Any, info: SessionInfo, sent: float) -> None:
        self.lost = threading.Event()
        self._begin(client, info)
        what = f"session {info.id!r}"
        self._keeper = Renewer(self._keepalive_once, self._clock(sent), FanOut(self), what).start()  # type: ignore[arg-type]

    def hold(self, kind: Any, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0, **fields: Any) -> SessionLease:
        """Acquires ``key`` of ``kind`` (``client.locks``, ``client.semaphores``, ...) in this
        session, waiting up to ``wait`` seconds, with the fields the kind's acquire needs
        (``permits``, ``mode``): what the guards by name call.

        Raises:
            Busy: still taken by others after ``wait``.
            SessionNotFound: the session has ended (nothing was granted).
            DeadlockError: waiting would close a cycle of sessions (refused at once, nothing granted).
            TypeError, ValueError: fields the kind does not take (nothing sent).
        """
        return self.client._http.run(self._holding(kind, key, wait, owner, priority, fields))

    def try_hold(self, kind: Any, key: str, owner: Optional[str] = None, priority: int = 0, **fields: Any) -> Optional[SessionLease]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        return self.client._http.run(acquiring.trying(self._holding(kind, key, 0.0, owner, priority, fields)))

    def multilock(self, keys: List[str], wait: float = MAX_WAIT, owner: Optional[str] = None) -> SessionMultiLease:
        """Takes every lock of ``keys`` at once in this session, waiting up to ``wait`` seconds::

            with session.multilock(["account-1", "account-2"], wait=10) as held:
                transfer(fence=held.tokens)

        Raises:
            LockHeld: some key stayed busy after ``wait`` (none is held).
            SessionNotFound: the session has ended.
            DeadlockError: waiting would close a cycle of sessions (refused at once, nothing granted).
        """
        return self.client._http.run(self._multilocking(keys, wait, owner))

    def try_multilock(self, keys: List[str], owner: Optional[str] = None) -> Optional[SessionMultiLease]:
        """Like :meth:`multilock` with no wait, but None when some key is busy."""
        return self.client._http.run(acquiring.trying(self._multilocking(keys, 0.0, owner)))

    def close(self) -> Optional[SessionClosed]:
        """Stops the keepalives and ends the session, releasing every lease of it (once; later calls
        return None). Never raises a broker error: see ``sessionbase.SessionBase._closing``.
        Returns the broker's answer, or None when the session had ended already."""
        return self.client._http.run(self._closing())

    def _keepalive_once(self, read_timeout: float, deadline: float) -> Any:
        return self.client._http.call(self._keepalive(read_timeout, deadline))

    def _detach(self, lease: Any) -> None:
        self._forget(lease)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Closes the session (and so every lease of it); exceptions of the block pass on."""
        self.close()


class Sessions:
    """``client.sessions``: the session calls, one request each (no keepalives: see
    :meth:`Client.session` for a session kept alive)."""

    def __init__(self, client: Any, http: Transport) -> None:
        self.client = client
        self._http = http

    def open(self, ttl: float = 15.0, name: Optional[str] = None, lock_delay: Optional[float] = None) -> SessionInfo:
        """Opens a session living ``ttl`` seconds (1 to 3600) past each keepalive; ``lock_delay``:
        how long its keys stay ungranted after it *expires*."""
        sessionspecs.check_ttl(ttl)
        return self._http.call(sessionspecs.open_session(ttl, name, lock_delay))

    def keepalive(self, session_id: str) -> SessionKeepalive:
        """Extends the session by its TTL from now. Raises ``SessionNotFound`` once it has ended."""
        return self._http.call(sessionspecs.keepalive(session_id))

    def close(self, session_id: str) -> SessionClosed:
        """Ends the session, releasing every lease in it. Raises ``SessionNotFound`` if it had ended."""
        return self._http.call(sessionspecs.close(session_id))

    def status(self, session_id: str) -> SessionStatus:
        """The session and every lease held in it. Raises ``SessionNotFound`` once it has ended."""
        return self._http.call(sessionspecs.status(session_id))

    def list(self, prefix: str = "", limit: Optional[int] = None, page_size: int = PAGE_SIZE) -> Iterator[SessionInfo]:
        """Yields the tenant's live sessions whose name starts with ``prefix``, by name then id, as a
        kind's ``list`` does."""
        yield from self._http.iterate(listing.pages(self._http.exchange, sessionspecs.LISTING, prefix, limit, page_size))


__all__ = ["Session", "SessionLease", "SessionLeader", "SessionMultiLease", "SessionPermit", "SessionRwLease", "Sessions"]
