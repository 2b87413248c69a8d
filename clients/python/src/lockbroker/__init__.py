"""Python client for lockbroker: locks, semaphores, reader-writer locks and leader election over its HTTP API.

A Python script guards its work with one ``with`` statement::

    from lockbroker import Client

    client = Client()  # $LOCKBROKER_URL, $LOCKBROKER_API_KEY
    with client.lock("nightly", ttl=30, wait=10) as lease:
        run_job(fencing_token=lease.token)

The async client is the same with ``async with`` (:class:`AsyncClient`,
``lockbroker.aio``). Standard library only.

Why the package is laid out as it is: the two clients do the same things in
the same order and differ only in how they wait (a blocked thread, or an
``await``). So every procedure is written once, without I/O, as a *plan*:
a generator that yields a step (connect, send, read a line, sleep, ...)
wherever it needs I/O or time to pass, and goes on with the step's outcome
(``steps.py``). Each client is a front end that does the steps, blocking or
awaited, and offers the same calls. The modules, one job each:

Shared by both clients, without I/O:

- ``options``: the arguments and environment variables (URL, key, TLS);
  ``clientbase``: a client built from them, and its multi-lock plans;
- ``specs``: what each kind's calls are; ``wire``: a call, its headers and
  the exception an error answer becomes; ``kindbase``: a kind, its calls and
  plans bound to it;
- ``steps``: the steps a plan yields, and how a front end walks one;
- ``exchange``: one call and its retries (the transport, as a plan);
  ``retry``: what is retried and after how long; ``deadlines``: the
  caller's deadline (:func:`deadline`);
- ``acquiring``: a guard's acquire, and what it gives back when interrupted;
  ``listing``: the listing, page after page;
- ``renewing``: a held lease's renewals; ``clock``: when a lease is renewed
  and when it counts as lost; ``heldbase``: what a held lease is (its
  fields, its release once);
- ``sessionspecs``: the session calls; ``sessionbase``: a session kept
  alive by the same renewal loop (its keepalive), its one lost signal
  fanned out to the leases held in it, its close;
- ``resuming``: the event stream and ``observe``, connected again when they
  break; ``sse``: the Server-Sent Events format and reading one stream;
- ``models``: the typed answers; ``errors``: the exceptions; ``guards``:
  the guards by name (``lock``, ``campaign``, ...), of a client and of a
  session.

The sync front end (threads):

- ``client``: :class:`Client`: the kinds, multi-locks, events, admin;
- ``kinds``: one lease model for every kind (``client.locks``,
  ``client.semaphores``, ``client.rwlocks``, ``client.elections``):
  acquire, renew, release, status, history, listing, guards;
- ``handles``: :class:`Lease` (and :class:`Permit`, :class:`RwLease`,
  :class:`Leader`, :class:`MultiLease`): held leases that renew themselves
  and release on ``with`` exit; ``renewal``: their renewal thread;
- ``sessions``: :class:`Session` (``client.session(ttl)``), kept alive by
  a thread and closed on ``with`` exit, the leases of every kind held in
  it (:class:`SessionLease`, :class:`SessionPermit`, :class:`SessionRwLease`,
  :class:`SessionLeader`, :class:`SessionMultiLease`), and
  :class:`Sessions` (``client.sessions``, the plain calls);
- ``events``: the event stream, resumed with ``Last-Event-ID``;
- ``running``: plans walked by blocking; ``transport``: their HTTP steps
  with ``http.client``.

``aio``: the async front end, the same over asyncio streams.
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
    DeadlockError,
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
    SessionNotFound,
    TooManyWaiters,
    Unauthenticated,
    Unavailable,
    Unreachable,
)
from .handles import Held, Leader, Lease, MultiLease, Permit, RwLease
from .kinds import Elections, Kind, Locks, RwLocks, Semaphores
from .models import (
    CycleStep,
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
    SessionClosed,
    SessionInfo,
    SessionKeepalive,
    SessionLeaseInfo,
    SessionStatus,
    Term,
    Validity,
)
from .sessions import Session, SessionLeader, SessionLease, SessionMultiLease, SessionPermit, SessionRwLease, Sessions
from .wire import quote_key


__all__ = [
    "MAX_WAIT",
    "AsyncClient",
    "BadRequest",
    "Busy",
    "CycleStep",
    "Client",
    "DeadlineExceeded",
    "DeadlockError",
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
    "Session",
    "SessionClosed",
    "SessionInfo",
    "SessionKeepalive",
    "SessionLeader",
    "SessionLease",
    "SessionLeaseInfo",
    "SessionMultiLease",
    "SessionNotFound",
    "SessionPermit",
    "SessionRwLease",
    "SessionStatus",
    "Sessions",
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
