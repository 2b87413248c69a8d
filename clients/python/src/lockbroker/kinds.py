"""One lease model for every kind of resource the broker serves.

A :class:`Kind` is every call the API has for one kind, on the client as
``client.locks``, ``client.semaphores``, ``client.rwlocks`` and
``client.elections``:

- plain calls, one request each, returning the typed answer
  (``models.py``): ``acquire``, ``renew``, ``release``, ``status``,
  ``history``, and ``list`` (every page of the listing);
- guards: ``hold`` and ``try_hold`` return a handle (``handles.py``) that
  renews in the background and releases on ``with`` exit.

Every acquire takes the same terms: ``ttl`` and ``wait`` (seconds) and
``priority``. A kind adds only what is its own: the fields its acquire
needs (a semaphore's ``permits``, a rwlock's ``mode``), the fields that
name a lease besides owner and token (a semaphore's ``slot``), the names
the API gives owner and token (an election's ``candidate`` and ``term``),
and calls of its own (``validate``, ``observe``).
"""

import os
import socket
import time
import urllib.parse
import uuid
from typing import Any, Dict, Generic, Iterator, List, Optional, Tuple, Type, TypeVar

from . import sse
from .errors import Busy
from .handles import Leader, Lease, Permit, RwLease
from .models import (
    Grant,
    Leadership,
    LockEvent,
    LockGrant,
    LockStatus,
    Model,
    Released,
    RwGrant,
    RwLockStatus,
    SemaphoreGrant,
    SemaphoreStatus,
    Term,
    Validity,
)
from .transport import Transport, quote_key, shrinking_wait

#: The broker's longest ``wait_ms`` (API.md), in seconds: the default wait of guards.
MAX_WAIT = 300.0

#: The listing's page size unless told otherwise (the broker's default).
PAGE_SIZE = 100

G = TypeVar("G", bound=Model)
S = TypeVar("S", bound=Model)
L = TypeVar("L", bound=Lease)


def default_owner() -> str:
    """``host:pid:uuid``: unique per call, so two ``with`` blocks of one process never re-enter each other's lock."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def ms(seconds: float) -> int:
    """Seconds as the API's whole milliseconds."""
    return int(round(seconds * 1000))


class Kind(Generic[G, S, L]):
    """The calls every kind shares. ``client.locks`` is one, ``client.semaphores`` another, ..."""

    #: The API's path segment (``/v1/{path}/{key}/...``) and the kind's name in messages.
    path = ""
    noun = ""
    #: What the API calls the lease's owner and token.
    owner_field = "owner"
    token_field = "token"
    #: The actions of acquiring and releasing.
    acquire_action = "acquire"
    release_action = "release"
    #: Fields every acquire must send besides the terms (``permits``, ``mode``).
    acquire_fields: Tuple[str, ...] = ()
    #: Fields that name a held lease besides owner and token (``slot``).
    id_fields: Tuple[str, ...] = ()
    grant_type: Type[Model] = Grant
    status_type: Type[Model] = Model
    handle_type: Type[Lease] = Lease

    def __init__(self, client: Any, http: Transport) -> None:
        self.client = client
        self._http = http

    def __repr__(self) -> str:
        return f"<{self.path} of {self.client!r}>"

    # -- plain calls -------------------------------------------------------

    def acquire(
        self, key: str, owner: str, ttl: float = 30.0, wait: float = 0.0, priority: int = 0, **fields: Any
    ) -> G:
        """Takes ``key`` for ``owner`` once, waiting up to ``wait`` seconds (0: try once); no
        renewal (see :meth:`hold`). ``fields``: what this kind's acquire needs besides.

        Raises:
            Busy (``LockHeld``, ``SemaphoreFull``): taken by others after ``wait``.
            BadRequest, InvalidKey, Unauthenticated, Unavailable, ...: see ``errors``.
        """
        self._check(fields)
        body = {self.owner_field: owner, "ttl_ms": ms(ttl), "wait_ms": ms(wait), "priority": priority, **fields}
        # Not idempotent: a repeat by the same owner would re-enter. A try
        # after a 503 waits only for what is left of `wait`.
        answer = self._post(
            key,
            self.acquire_action,
            shrinking_wait(body, wait),
            idempotent=False,
            read_timeout=self.client.timeout + max(0.0, wait),
        )
        return self.grant_type.from_json(answer)  # type: ignore[return-value]

    def renew(self, key: str, owner: str, token: int, ttl: float = 30.0, **ids: Any) -> G:
        """Extends a held lease to ``ttl`` seconds from now (``ids``: a semaphore's ``slot``).

        Raises:
            LeaseLost: it expired, or is not ``owner``'s with ``token``.
        """
        body = dict(self._ids(owner, token, ids), ttl_ms=ms(ttl))
        return self.grant_type.from_json(self._post(key, "renew", body, idempotent=True))  # type: ignore[return-value]

    def release(self, key: str, owner: str, token: int, **ids: Any) -> Any:
        """Gives the lease (one hold of a re-entered lock) back; :class:`Released` but for an election.

        Raises:
            LeaseLost: ``token`` is not ``owner``'s live lease.
        """
        return self.release_ids(key, self._ids(owner, token, ids))

    def status(self, key: str) -> S:
        """Who holds ``key`` now, and how many wait."""
        answer = self._http.request("GET", f"/v1/{self.path}/{quote_key(key)}", idempotent=True)
        return self.status_type.from_json(answer)  # type: ignore[return-value]

    def list(self, prefix: str = "", limit: Optional[int] = None, page_size: int = PAGE_SIZE) -> Iterator[S]:
        """Yields the live ones whose storage key starts with ``prefix`` (bytes, literally), in
        storage-key order, at most ``limit`` (None: all), fetching ``page_size`` (1 to 1000) at
        a time and following each page's cursor. One live for the whole scan is yielded exactly
        once; one granted or released meanwhile may or may not be.
        """
        left, cursor = limit, None
        while left is None or left > 0:
            query: Dict[str, Any] = {"prefix": prefix, "limit": page_size if left is None else min(page_size, left)}
            if cursor is not None:
                query["cursor"] = cursor
            page = self._http.request("GET", f"/v1/{self.path}?{_query(query)}", idempotent=True)
            for item in page.get("items") or []:
                yield self.status_type.from_json(item)  # type: ignore[misc]
                if left is not None:
                    left -= 1
                    if left == 0:
                        return
            cursor = page.get("next")
            if cursor is None:
                return

    # -- guards --------------------------------------------------------------

    def hold(
        self,
        key: str,
        ttl: float = 30.0,
        wait: float = MAX_WAIT,
        owner: Optional[str] = None,
        priority: int = 0,
        **fields: Any,
    ) -> L:
        """Acquires ``key``, waiting up to ``wait`` seconds, and keeps it renewed every third of
        ``ttl`` until released; use it in a ``with`` block, which releases it at the end (also on
        an exception). ``owner`` defaults to a new ``host:pid:uuid``.

        Raises:
            Busy: still taken by others after ``wait``.
        """
        sent = time.monotonic()
        grant = self.acquire(key, owner or default_owner(), ttl, wait, priority, **fields)
        return self.handle_type(self, grant, ttl, sent)  # type: ignore[return-value]

    def try_hold(
        self, key: str, ttl: float = 30.0, owner: Optional[str] = None, priority: int = 0, **fields: Any
    ) -> Optional[L]:
        """Like :meth:`hold` with no wait, but None when taken by others."""
        try:
            return self.hold(key, ttl, 0.0, owner, priority, **fields)
        except Busy:
            return None

    # -- what handles use ----------------------------------------------------

    def lease_ids(self, grant: Any) -> Dict[str, Any]:
        """What names the lease of ``grant`` in its renewals and release."""
        return self._ids(grant.owner, grant.token, {f: getattr(grant, f) for f in self.id_fields})

    def renew_once(self, key: str, ids: Dict[str, Any], ttl: float, read_timeout: float) -> Any:
        """One renewal for a handle's renewal thread, which does its own retrying against the lease's deadline."""
        body = dict(ids, ttl_ms=ms(ttl))
        return self._post(key, "renew", body, idempotent=True, read_timeout=read_timeout, retries=0)

    def release_ids(self, key: str, ids: Dict[str, Any]) -> Any:
        return Released.from_json(self._post(key, self.release_action, ids, idempotent=True))

    # -- requests ------------------------------------------------------------

    def _ids(self, owner: str, token: int, ids: Dict[str, Any]) -> Dict[str, Any]:
        missing = [f for f in self.id_fields if ids.get(f) is None]
        unknown = [f for f in ids if f not in self.id_fields]
        if missing or unknown:
            raise TypeError(f"a {self.noun} lease is named by {self.id_fields!r} besides owner and token")
        return {self.owner_field: owner, self.token_field: token, **ids}

    def _check(self, fields: Dict[str, Any]) -> None:
        if sorted(fields) != sorted(self.acquire_fields):
            raise TypeError(f"a {self.noun} acquire takes {self.acquire_fields!r} besides the terms, not {sorted(fields)!r}")

    def _post(self, key: str, action: str, body: Any, **options: Any) -> Dict[str, Any]:
        return self._http.request("POST", f"/v1/{self.path}/{quote_key(key)}/{action}", body, **options)


class _Audited(Kind[G, S, L]):
    """A kind whose changes the broker records (locks, semaphores, rwlocks)."""

    def history(self, key: str, limit: Optional[int] = None) -> List[LockEvent]:
        """The latest events of ``key`` (grants, releases, expiries, handoffs, force-releases),
        newest first; ``limit`` 1 to 1000, None for the broker's default (100).

        Raises:
            BadRequest: ``limit`` out of range.
        """
        query = "" if limit is None else f"?limit={int(limit)}"
        answer = self._http.request("GET", f"/v1/{self.path}/{quote_key(key)}/history{query}", idempotent=True)
        return [LockEvent.from_json(e) for e in answer["events"]]


class Locks(_Audited[LockGrant, LockStatus, Lease]):
    """``client.locks``: exclusive locks. The same owner acquiring again re-enters (same token,
    ``hold_count`` + 1); ``release`` gives one hold back."""

    path, noun = "locks", "lock"
    grant_type, status_type, handle_type = LockGrant, LockStatus, Lease

    def validate(self, key: str, token: int) -> Validity:
        """Whether ``token`` is the live grant of ``key`` now (a sequencer check; may be stale on arrival)."""
        return Validity.from_json(self._post(key, "validate", {"token": token}, idempotent=True))


class Semaphores(_Audited[SemaphoreGrant, SemaphoreStatus, Permit]):
    """``client.semaphores``: up to ``permits`` holders at once, each in its own slot.

    ``acquire(key, owner, permits=3)``; ``renew``/``release`` also take the
    ``slot``. An acquire with another size than the semaphore's raises
    ``PermitsMismatch``; a full one ``SemaphoreFull``.
    """

    path, noun = "semaphores", "semaphore"
    acquire_fields, id_fields = ("permits",), ("slot",)
    grant_type, status_type, handle_type = SemaphoreGrant, SemaphoreStatus, Permit


class RwLocks(_Audited[RwGrant, RwLockStatus, RwLease]):
    """``client.rwlocks``: many readers or one writer, ``acquire(key, owner, mode="read")``.

    A queued writer blocks new readers. The same owner asking again for the
    mode it holds gets its lease back renewed (same token).
    """

    path, noun = "rwlocks", "rwlock"
    acquire_fields = ("mode",)
    grant_type, status_type, handle_type = RwGrant, RwLockStatus, RwLease

    def _check(self, fields: Dict[str, Any]) -> None:
        super()._check(fields)
        if fields["mode"] not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', not {fields['mode']!r}")


class Elections(Kind[Term, Leadership, Leader]):
    """``client.elections``: one leader at a time. ``acquire`` campaigns (the owner is the
    candidate, the token the term), ``release`` resigns; a leader campaigning again stays leader
    of the same term."""

    path, noun = "elections", "election"
    owner_field, token_field = "candidate", "term"
    acquire_action, release_action = "campaign", "resign"
    grant_type, status_type, handle_type = Term, Leadership, Leader

    def release_ids(self, key: str, ids: Dict[str, Any]) -> None:
        self._post(key, self.release_action, ids, idempotent=True)

    def leader(self, name: str) -> Leadership:
        """Who leads ``name`` now (``leader`` None when nobody does): :meth:`status`."""
        return self.status(name)

    def observe(self, name: str, timeout: Optional[float] = None, idle_timeout: float = 45.0) -> Iterator[Leadership]:
        """Yields the leadership of ``name`` now, then once per change of leader.

        Every new term is seen, and a vacancy (``leader`` None) when the
        leader resigns or expires. Stops (returns) after ``timeout`` seconds
        (None: never); closing the generator or leaving a ``for`` loop closes
        the stream.

        Raises:
            Unreachable: nothing arrived for ``idle_timeout`` seconds (the
                broker sends a keep-alive every 15 s), or the stream broke.
        """
        end = None if timeout is None else time.monotonic() + timeout
        response = self._http.open(
            "GET",
            f"/v1/elections/{quote_key(name)}/observe",
            idempotent=True,
            read_timeout=idle_timeout if timeout is None else max(sse.MIN_WAIT, min(idle_timeout, timeout)),
            headers={"Accept": "text/event-stream"},
        )
        for message in sse.read(response, end, idle_timeout, f"observing {name!r}"):
            if message.event == "leader":
                yield Leadership.from_json(message.data)


def _query(params: Dict[str, Any]) -> str:
    """A query string, every byte of a value but the unreserved ones percent-encoded."""
    return urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="")
