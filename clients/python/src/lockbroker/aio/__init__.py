"""The async client: ``AsyncClient`` and what it hands out. Standard library only (``asyncio``).

::

    from lockbroker import AsyncClient

    client = AsyncClient()   # $LOCKBROKER_URL, $LOCKBROKER_API_KEY, ...
    async with client.lock("nightly", ttl=30) as lease:
        await run_job(fencing_token=lease.token)

The modules, one concern each:

- ``client``: :class:`AsyncClient`: the kinds, guards by name, multi-locks, events;
- ``kinds``: the kinds' calls as coroutines, guards, ``list`` and ``observe``
  as async iterators;
- ``handles``: :class:`Acquiring` (what a guard returns) and the held leases;
- ``renewal``: the renewal task;
- ``sessions``: :class:`AsyncSession` (kept alive by a task, closed on
  ``async with`` exit), the leases of every kind held in it, ``client.sessions``;
- ``streams``: the event stream;
- ``running``: plans walked by awaiting each step; ``transport``: their
  HTTP steps; ``http``: HTTP/1.1 over asyncio streams.

Everything else is the sync client's, shared (see ``lockbroker``): the
options, the calls, and every procedure as a plan (``steps.py``): the
exchange and its retries, guards and their clean-up, listing, streams,
renewal; the models and errors. Here is only the waiting.
"""

from .client import AsyncClient
from .handles import Acquiring, AsyncHeld, AsyncLeader, AsyncLease, AsyncMultiLease, AsyncPermit, AsyncRwLease
from .kinds import AsyncElections, AsyncKind, AsyncLocks, AsyncRwLocks, AsyncSemaphores
from .sessions import (
    AsyncSession,
    AsyncSessionLeader,
    AsyncSessionLease,
    AsyncSessionMultiLease,
    AsyncSessionPermit,
    AsyncSessionRwLease,
    AsyncSessions,
)
from .streams import AsyncEventStream

__all__ = [
    "Acquiring",
    "AsyncClient",
    "AsyncElections",
    "AsyncEventStream",
    "AsyncHeld",
    "AsyncKind",
    "AsyncLeader",
    "AsyncLease",
    "AsyncLocks",
    "AsyncMultiLease",
    "AsyncPermit",
    "AsyncRwLease",
    "AsyncRwLocks",
    "AsyncSemaphores",
    "AsyncSession",
    "AsyncSessionLeader",
    "AsyncSessionLease",
    "AsyncSessionMultiLease",
    "AsyncSessionPermit",
    "AsyncSessionRwLease",
    "AsyncSessions",
]
