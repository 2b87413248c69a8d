"""The guards by their usual names (``lock``, ``semaphore``, ``read_lock``, ``campaign``, ...):
one mixin for both clients, each name the ``hold``/``try_hold`` of a kind
(:class:`GuardNames`), and one for both clients' sessions, each name the
session's ``hold``/``try_hold`` of a kind (:class:`SessionGuardNames`).

In the sync client a guard is the held lease (``with client.lock(k) as
lease``) and a ``try_`` guard returns it or None; in the async client a
guard is an ``Acquiring`` (``async with client.lock(k) as lease``, or
``lease = await client.lock(k)``) and a ``try_`` guard is a coroutine. The
terms are the same: ``ttl`` and ``wait`` in seconds, ``owner`` (default: a
new ``host:pid:uuid`` per call), ``priority``; ``wait`` defaults to the
broker's longest, 300 s. A session's guards take the same terms but
``ttl``: what they hold lives as long as the session.
"""

from typing import Any, Callable, Optional

from .specs import MAX_WAIT


class GuardNames:
    """Expects ``locks``, ``semaphores``, ``rwlocks`` and ``elections`` kinds on ``self``."""

    locks: Any
    semaphores: Any
    rwlocks: Any
    elections: Any

    def lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """Takes the lock ``key``, waiting up to ``wait`` seconds, and keeps it renewed until
        released. Raises ``LockHeld`` if still held by another owner after ``wait``."""
        return self.locks.hold(key, *terms, **named)

    def try_lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """Like :meth:`lock` with no wait, but None when another owner holds it."""
        return self.locks.try_hold(key, *terms, **named)

    def semaphore(self, key: str, permits: int, *terms: Any, **named: Any) -> Any:
        """Takes one of ``permits`` slots of the semaphore ``key`` and keeps it renewed."""
        return self.semaphores.hold(key, *terms, permits=permits, **named)

    def try_semaphore(self, key: str, permits: int, *terms: Any, **named: Any) -> Any:
        """Like :meth:`semaphore` with no wait, but None when every permit is taken."""
        return self.semaphores.try_hold(key, *terms, permits=permits, **named)

    def rwlock(self, key: str, mode: str, *terms: Any, **named: Any) -> Any:
        """Takes the rwlock ``key`` in ``mode`` (``"read"`` or ``"write"``) and keeps it renewed."""
        return self.rwlocks.hold(key, *terms, mode=mode, **named)

    def read_lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """A shared (read) lease of the rwlock ``key``, renewed until released."""
        return self.rwlock(key, "read", *terms, **named)

    def write_lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """An exclusive (write) lease of the rwlock ``key``, renewed until released."""
        return self.rwlock(key, "write", *terms, **named)

    def try_read_lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """Like :meth:`read_lock` with no wait, but None when a writer holds it or waits."""
        return self.rwlocks.try_hold(key, *terms, mode="read", **named)

    def try_write_lock(self, key: str, *terms: Any, **named: Any) -> Any:
        """Like :meth:`write_lock` with no wait, but None when anyone holds it or waits."""
        return self.rwlocks.try_hold(key, *terms, mode="write", **named)

    def campaign(
        self, name: str, ttl: float = 30.0, wait: float = MAX_WAIT, candidate: Optional[str] = None, priority: int = 0
    ) -> Any:
        """Becomes leader of ``name``, waiting up to ``wait`` seconds, and stays leader (renewed)
        until resigning. Raises ``LockHeld`` if another candidate still leads after ``wait``."""
        return self.elections.hold(name, ttl, wait, candidate, priority)

    def try_campaign(self, name: str, ttl: float = 30.0, candidate: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`campaign` with no wait, but None when another candidate leads."""
        return self.elections.try_hold(name, ttl, candidate, priority)


class SessionGuardNames:
    """The guards of a session by the names of :class:`GuardNames`, without ``ttl``: each holds
    its lease in the session (no renewals of its own; lost with the session; released by its
    handle, or by the session's close). Expects the session's ``hold``/``try_hold`` of a kind
    and its ``client`` on ``self``.

    Each returns the kind's own handle type, held in the session (a ``Permit`` with its
    ``slot``, a ``Leader`` with its ``term`` and ``resign``, ...), as the client's guard of that
    name does: in the async client an ``Acquiring`` to ``async with`` or ``await``, and a
    ``try_`` guard is a coroutine.
    """

    client: Any
    hold: Callable[..., Any]
    try_hold: Callable[..., Any]

    def lock(self, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Takes the lock ``key`` in this session, waiting up to ``wait`` seconds. It lives as long
        as the session; ``owner`` defaults to a new ``host:pid:uuid`` (``sessionbase``).

        Raises:
            LockHeld: still held by another owner after ``wait``.
            SessionNotFound: the session has ended (nothing was granted).
            DeadlockError: waiting would close a cycle of sessions (refused at once, nothing granted).
        """
        return self.hold(self.client.locks, key, wait, owner, priority)

    def try_lock(self, key: str, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`lock` with no wait, but None when another owner holds it."""
        return self.try_hold(self.client.locks, key, owner, priority)

    def semaphore(self, key: str, permits: int, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Takes one of ``permits`` slots of the semaphore ``key`` in this session. Raises
        ``SemaphoreFull`` if every permit is still taken after ``wait``, ``PermitsMismatch`` if
        the semaphore has another size."""
        return self.hold(self.client.semaphores, key, wait, owner, priority, permits=permits)

    def try_semaphore(self, key: str, permits: int, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`semaphore` with no wait, but None when every permit is taken."""
        return self.try_hold(self.client.semaphores, key, owner, priority, permits=permits)

    def rwlock(self, key: str, mode: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Takes the rwlock ``key`` in ``mode`` (``"read"`` or ``"write"``) in this session."""
        return self.hold(self.client.rwlocks, key, wait, owner, priority, mode=mode)

    def read_lock(self, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> Any:
        """A shared (read) lease of the rwlock ``key``, held in this session."""
        return self.rwlock(key, "read", wait, owner, priority)

    def write_lock(self, key: str, wait: float = MAX_WAIT, owner: Optional[str] = None, priority: int = 0) -> Any:
        """An exclusive (write) lease of the rwlock ``key``, held in this session."""
        return self.rwlock(key, "write", wait, owner, priority)

    def try_read_lock(self, key: str, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`read_lock` with no wait, but None when a writer holds it or waits."""
        return self.try_hold(self.client.rwlocks, key, owner, priority, mode="read")

    def try_write_lock(self, key: str, owner: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`write_lock` with no wait, but None when anyone holds it or waits."""
        return self.try_hold(self.client.rwlocks, key, owner, priority, mode="write")

    def campaign(self, name: str, wait: float = MAX_WAIT, candidate: Optional[str] = None, priority: int = 0) -> Any:
        """Becomes leader of ``name`` in this session, waiting up to ``wait`` seconds, and stays
        leader as long as the session lives (or until resigning). ``candidate`` defaults to a new
        ``host:pid:uuid``. Raises ``LockHeld`` if another candidate still leads after ``wait``."""
        return self.hold(self.client.elections, name, wait, candidate, priority)

    def try_campaign(self, name: str, candidate: Optional[str] = None, priority: int = 0) -> Any:
        """Like :meth:`campaign` with no wait, but None when another candidate leads."""
        return self.try_hold(self.client.elections, name, candidate, priority)
