"""Python client for lockbroker: locks, semaphores, reader-writer locks and leader election over its HTTP API.

A Python script guards its work with one ``with`` statement::

    from lockbroker import Client

    client = Client()  # $LOCKBROKER_URL, $LOCKBROKER_API_KEY
    with client.lock("nightly", ttl=30, wait=10) as lease:
        run_job(fencing_token=lease.token)

Standard library only. The package, one module per concern:

- ``client``: :class:`Client`: the kinds, guards by name, multi-locks, events;
- ``kinds``: one lease model for every kind (``client.locks``,
  ``client.semaphores``, ``client.rwlocks``, ``client.elections``):
  acquire, renew, release, status, history, listing, guards;
- ``handles``: :class:`Lease` (and :class:`Permit`, :class:`RwLease`,
  :class:`Leader`, :class:`MultiLease`): held leases that renew themselves
  and release on ``with`` exit;
- ``renewal``: the renewal thread and when a lease counts as lost;
- ``events``: the event stream, resumed with ``Last-Event-ID``;
- ``transport``: HTTP, key encoding, errors and retries;
- ``models``: the typed answers; ``errors``: the exceptions; ``sse``: the
  Server-Sent Events format.
"""

from .client import MAX_WAIT, Client, default_owner
from .events import EventStream
from .errors import (
    BadRequest,
    Busy,
    Forbidden,
    InvalidKey,
    LeaseLost,
    LockbrokerError,
    LockHeld,
    NotFound,
    NotOwner,
    PermitsMismatch,
    PolicyError,
    SemaphoreFull,
    TooLarge,
    TooManyStreams,
    QuotaExceeded,
    RateLimited,
    TooManyWaiters,
    Unauthenticated,
    Unavailable,
    Unreachable,
)
from .handles import Held, Leader, Lease, MultiLease, Permit, RwLease
from .kinds import Elections, Kind, Locks, RwLocks, Semaphores
from .models import (
    Event,
    ForceReleased,
    Grant,
    Leadership,
    LockEvent,
    LockGrant,
    LockStatus,
    MultiLockEntry,
    MultiLockGrant,
    MultiLockReleased,
    Released,
    RwGrant,
    RwHolder,
    RwLockStatus,
    SemaphoreGrant,
    SemaphoreHolder,
    SemaphoreStatus,
    Term,
    Validity,
)
from .transport import quote_key

__version__ = "0.1.0"

__all__ = [
    "MAX_WAIT",
    "BadRequest",
    "Busy",
    "Client",
    "Elections",
    "Event",
    "EventStream",
    "Forbidden",
    "ForceReleased",
    "Grant",
    "Held",
    "InvalidKey",
    "Kind",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LockEvent",
    "LockGrant",
    "LockHeld",
    "LockStatus",
    "LockbrokerError",
    "Locks",
    "MultiLease",
    "MultiLockEntry",
    "MultiLockGrant",
    "MultiLockReleased",
    "NotFound",
    "NotOwner",
    "Permit",
    "PermitsMismatch",
    "PolicyError",
    "Released",
    "RwGrant",
    "RwHolder",
    "RwLease",
    "RwLockStatus",
    "RwLocks",
    "SemaphoreFull",
    "SemaphoreGrant",
    "SemaphoreHolder",
    "SemaphoreStatus",
    "Semaphores",
    "Term",
    "TooLarge",
    "TooManyStreams",
    "QuotaExceeded",
    "RateLimited",
    "TooManyWaiters",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
    "Validity",
    "default_owner",
    "quote_key",
]
