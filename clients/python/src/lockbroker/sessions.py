"""Sessions in the sync client: :class:`Session` (what ``client.session(ttl)`` gives: kept alive
by a thread, closed at the end of a ``with`` block), :class:`SessionLease` (a lease held in it),
and :class:`Sessions` (``client.sessions``: the plain calls).

What does not wait (the fields, the lost fan-out, the plans of an acquire in the session and of
the close) is shared with the async client, in ``sessionbase.py``; here are the thread and the
``with``.
"""

import threading
from typing import Any, Iterator, Optional

from . import acquiring, listing, sessionspecs
from .handles import Held
from .models import SessionClosed, SessionInfo, SessionKeepalive, SessionStatus
from .renewal import Renewer
from .sessionbase import FanOut, SessionBase, SessionLeaseBase
from .specs import MAX_WAIT, PAGE_SIZE
from .transport import Transport


class SessionLease(SessionLeaseBase, Held):
    """A lease held in a session (a lock's, for now): ``key``, ``owner``, ``token``, ``grant``,
    ``session``. Not renewed on its own: the session's keepalives keep it.

    Attributes:
        lost: a ``threading.Event``, set when the session is lost (then every lease of it is), or
            when its release finds it gone.

    ``release()`` gives it back now and leaves the session's other leases held; the end of its
    ``with`` block does too. Closing the session releases whatever is left.
    """


class Session(SessionBase):
    """A session this process keeps alive: a keepalive every third of its TTL in a background
    thread, until :meth:`close` (the end of its ``with`` block)::

        with client.session(ttl=15) as session:
            a = session.lock("job-a")
            b = session.lock("job-b")
            while not session.lost.wait(1.0):
                work(a.token, b.token)

    Attributes:
        lost: a ``threading.Event``, set once when the session can no longer be kept alive (the
            broker answered a keepalive ``session_not_found``, or none was confirmed before TTL
            could have passed since the last one was sent). Every lease of it is lost too: others
            may hold those keys from then on.
    """

    _lease_type = SessionLease

    def __init__(self, client: Any, info: SessionInfo, sent: float) -> None:
        self.lost = threading.Event()
        self._begin(client, info)
        what = f"session {info.id!r}"
        self._keeper = Renewer(self._keepalive_once, self._clock(sent), FanOut(self), what).start()  # type: ignore[arg-type]

    def hold(self, kind: Any, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0, **fields: Any) -> SessionLease:
        """Acquires ``key`` of ``kind`` (``client.locks``) in this session, waiting up to ``wait``
        seconds: what :meth:`lock` is for any kind the broker holds in sessions.

        Raises:
            Busy: still taken by others after ``wait``.
            SessionNotFound: the session has ended (nothing was granted).
            TypeError: the broker does not hold this kind in sessions (locks only, for now).
        """
        return self.client._http.run(self._holding(kind, key, wait, owner, priority, fields))

    def try_hold(self, kind: Any, key: str, owner: Optional[str] = None, priority: int = 0, **fields: Any) -> Optional[SessionLease]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        return self.client._http.run(acquiring.trying(self._holding(kind, key, 0.0, owner, priority, fields)))

    def lock(self, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> SessionLease:
        """Takes the lock ``key`` in this session, waiting up to ``wait`` seconds. It lives as long
        as the session; ``owner`` defaults to a new ``host:pid:uuid`` (``sessionbase``).

        Raises:
            LockHeld: still held by another owner after ``wait``.
            SessionNotFound: the session has ended.
        """
        return self.hold(self.client.locks, key, wait, owner, priority)

    def try_lock(self, key: str, owner: Optional[str] = None, priority: int = 0) -> Optional[SessionLease]:
        """Like :meth:`lock` with no wait, but None when another owner holds it."""
        return self.try_hold(self.client.locks, key, owner, priority)

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


__all__ = ["Session", "SessionLease", "Sessions"]
