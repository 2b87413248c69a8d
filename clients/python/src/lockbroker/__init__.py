"""Python client for lockbroker: locks, semaphores, reader-writer locks and leader election over its HTTP API.

A Python script guards its work with one ``with`` statement::

    from lockbroker import Client

    client = Client()  # $LOCKBROKER_URL, $LOCKBROKER_API_KEY
    with client.lock("nightly", ttl=30, wait=10) as lease:
        run_job(fencing_token=lease.token)

The async client is the same with ``async with`` (:class:`AsyncClient`,
``lockbroker.aio``). Standard library only. The package, one module per
concern:

- ``client``: :class:`Client`: the kinds, multi-locks, events, admin;
  ``guards``: the guards by name (``lock``, ``campaign``, ...), shared with
  :class:`AsyncClient`;
- ``kinds``: one lease model for every kind (``client.locks``,
  ``client.semaphores``, ``client.rwlocks``, ``client.elections``):
  acquire, renew, release, status, history, listing, guards;
- ``handles``: :class:`Lease` (and :class:`Permit`, :class:`RwLease`,
  :class:`Leader`, :class:`MultiLease`): held leases that renew themselves
  and release on ``with`` exit; ``renewal``: their renewal thread;
- ``events``: the event stream, resumed with ``Last-Event-ID``;
- ``transport``: HTTP with ``http.client``;
- ``aio``: the async client (its own kinds, handles, renewal task, streams
  and HTTP/1.1 over asyncio streams).

Shared by both clients, without I/O:

- ``options``: the arguments and environment variables (URL, key, TLS);
- ``specs``: what each kind's calls are; ``wire``: a call, its headers and
  the exception an error answer becomes;
- ``retry``: what is retried and after how long; ``deadlines``: the
  caller's deadline (:func:`deadline`); ``clock``: when a lease is renewed
  and when it counts as lost;
- ``models``: the typed answers; ``errors``: the exceptions; ``sse``: the
  Server-Sent Events format.
"""

from ._version import __version__
from .aio import AsyncClient
from .client import MAX_WAIT, Client, default_owner
from .deadlines import deadline
from .events import EventStream
from .errors import (
    BadRequest,
    Busy,
    DeadlineExceeded,
    Forbidden,
    InvalidKey,
    LeaseLost,
    LockbrokerError,
    LockHeld,
    NotFound,
    NotOwner,
    OutcomeUnknown,
    PermitsMismatch,
    PolicyError,
    SemaphoreFull,
    TlsError,
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
from .wire import quote_key


__all__ = [
    "MAX_WAIT",
    "AsyncClient",
    "BadRequest",
    "Busy",
    "Client",
    "DeadlineExceeded",
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
    "OutcomeUnknown",
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
    "TlsError",
    "TooLarge",
    "TooManyStreams",
    "QuotaExceeded",
    "RateLimited",
    "TooManyWaiters",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
    "Validity",
    "deadline",
    "default_owner",
    "quote_key",
]
