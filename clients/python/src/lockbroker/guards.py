"""The guards by their usual names (``lock``, ``semaphore``, ``read_lock``, ``campaign``, ...):
one mixin for both clients, each name the ``hold``/``try_hold`` of a kind.

In the sync client a guard is the held lease (``with client.lock(k) as
lease``) and a ``try_`` guard returns it or None; in the async client a
guard is an ``Acquiring`` (``async with client.lock(k) as lease``, or
``lease = await client.lock(k)``) and a ``try_`` guard is a coroutine. The
terms are the same: ``ttl`` and ``wait`` in seconds, ``owner`` (default: a
new ``host:pid:uuid`` per call), ``priority``; ``wait`` defaults to the
broker's longest, 300 s.
"""

from typing import Any, Optional

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
