"""What a guarded acquire returns: a held lease that renews itself and cleans up.

:class:`Held` is the guard every held thing shares: a renewal thread
(``renewal.py``, by the rules of ``clock.py``), a ``lost`` event, and a
release that runs once, when the ``with`` block ends (also with an
exception) or when called.
:class:`Lease` is a held lease of any kind, bound to its kind
(``kinds.py``) for renewing and releasing it; a kind's handle adds only
what is its own: :class:`Permit` (a semaphore's ``slot``), :class:`RwLease`
(a rwlock's ``mode``), :class:`Leader` (an election's ``name``,
``candidate``, ``term`` and ``resign``). :class:`MultiLease` holds several
locks at once. They are acquired before they are returned, like
``open()``: ``with client.lock(...) as lease`` and
``lease = client.lock(...); ...; lease.release()`` both work.

What does not wait (the fields, the release's rules) is shared with the
async handles, in ``heldbase.py``; here are the thread and the ``with``.
"""

import threading
from typing import Any, Callable, TypeVar

from .clock import LeaseClock
from .heldbase import HeldBase, LeaderFields, LeaseBase, MultiLeaseBase, PermitFields, RwFields
from .renewal import Renewer
from .running import RUNNER

H = TypeVar("H", bound="Held")


class Held(HeldBase):
    """Something this process holds: renewed in the background until released.

    Attributes:
        lost: a ``threading.Event``, set when the lease can no longer be
            renewed (the broker says it is gone, or no renewal was confirmed
            before it would end). From then on someone else may hold it: stop
            the work it guards, or at least do not trust the fencing token.
    """

    def __init__(
        self,
        what: str,
        clock: LeaseClock,
        renew: Callable[[float, float], Any],
        release: Callable[[], Any],
    ) -> None:
        self.lost = threading.Event()
        self._begin(what, release, Renewer(renew, clock, self.lost, what).start())

    def release(self) -> Any:
        """Stops renewing and releases now (once; later calls return None). Returns the broker's
        answer (:class:`Released` for a lock, permit or rwlock lease).

        A lease already known to be lost (``lost`` set) is still released if
        the broker has it, and returns None if not: its key may be someone
        else's now, and their lease is left alone (the release names this
        lease's token).

        Raises:
            LeaseLost: the lease had ended unnoticed (``lost`` is set now).
            LockbrokerError: the broker could not be asked.
        """
        return RUNNER.run(self._releasing())

    def close(self) -> None:
        """Releases the lease if it is still held; never raises (what a ``with`` block's end does).

        A lease that cannot be released ends by its TTL. A release answered
        ``lease_lost`` sets ``lost``; any failure is logged on the
        ``lockbroker`` logger.
        """
        RUNNER.run(self._closing())

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Releases the lease as :meth:`close` does; exceptions of the block pass on."""
        self.close()


class Lease(LeaseBase, Held):
    """A held lease of one key of any kind (a lock's is exactly this).

    ``key``, ``owner`` and ``token`` (the fencing token: pass it to what the
    lease protects) are the grant's; ``grant`` is the whole answer of the
    acquire (:class:`LockGrant`, :class:`SemaphoreGrant`, ...).
    """


class Permit(PermitFields, Lease):
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""


class RwLease(RwFields, Lease):
    """A held read or write lease of a reader-writer lock (``mode``)."""


class Leader(LeaderFields, Lease):
    """Leadership of an election ``name``, won by ``candidate``; ``term`` is the fencing token."""

    def resign(self) -> None:
        """Steps down now (once). Raises as :meth:`Held.release`."""
        self.release()


class MultiLease(MultiLeaseBase, Held):
    """Several locks held together (a multi-lock): renewed and released as one.

    ``tokens`` maps each key (as named) to its own fencing token; pass each
    to what that key protects.
    """
