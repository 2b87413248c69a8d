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
- ``streams``: Server-Sent Events and the event stream;
- ``transport``: the calls, their errors and retries; ``http``: HTTP/1.1
  over asyncio streams.

Everything else (options, calls, retry and renewal rules, models, errors) is
the sync client's, shared.
"""

from .client import AsyncClient
from .handles import Acquiring, AsyncHeld, AsyncLeader, AsyncLease, AsyncMultiLease, AsyncPermit, AsyncRwLease
from .kinds import AsyncElections, AsyncKind, AsyncLocks, AsyncRwLocks, AsyncSemaphores
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
]
