"""What each kind of resource is, and the calls it makes: shared by both clients.

A :class:`Spec` knows a kind's path, the names the API gives its owner and
token, the fields its acquire needs and the ones that name a held lease, its
answer types, and builds its :class:`~lockbroker.wire.Call` values. The sync
kinds (``kinds.py``) and the async ones (``aio/kinds.py``) only send them,
so a rule about a kind lives here once. What takes more than one call is in the
plans beside it (``acquiring.py``, ``listing.py``, ``resuming.py``).

One model for every kind: ``acquire``, ``renew``, ``release``, ``status``,
``history``, one page of a listing; a kind adds only what is its own (a
semaphore's ``permits`` and ``slot``, a rwlock's ``mode``, an election's
``candidate`` and ``term``, a lock's ``validate``). Multi-locks, the admin
force-release, the event stream and ``observe`` are here too.
"""

import time
from typing import Any, Dict, List, Optional, Tuple, Type

from .models import (
    Grant,
    ForceReleased,
    Leadership,
    LockEvent,
    LockGrant,
    LockStatus,
    Model,
    MultiLockGrant,
    MultiLockReleased,
    Released,
    RwGrant,
    RwLockStatus,
    SemaphoreGrant,
    SemaphoreStatus,
    Term,
    Validity,
)
from .wire import Call, ms, query, quote_key, waiting_body

#: The broker's longest ``wait_ms`` (API.md), in seconds: the default wait of guards.
MAX_WAIT = 300.0

#: The listing's page size unless told otherwise (the broker's default).
PAGE_SIZE = 100


class Spec:
    """The calls of one kind (this base class has what every kind shares)."""

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
    #: Whether the broker keeps its history (``GET .../history``).
    audited = True
    grant_type: Type[Model] = Grant
    status_type: Type[Model] = Model

    # -- calls -----------------------------------------------------------------

    def acquire(
        self,
        key: str,
        owner: str,
        ttl: float,
        wait: float,
        priority: int,
        fields: Dict[str, Any],
        timeout: float,
        session: Optional[str] = None,
    ) -> Call:
        """Takes ``key`` for ``owner``, waiting up to ``wait`` seconds (0: try once); held in the
        session ``session`` (its id) when given, in place of a TTL of its own (``ttl`` unused):
        every kind is.

        Not idempotent: a repeat by the same owner would re-enter. A try
        after a 503 waits only for what is left of ``wait``.
        """
        self.check(fields)
        body = {self.owner_field: owner, **lifetime(ttl, session), "wait_ms": ms(wait), "priority": priority, **fields}
        body_now, wait_until = waiting_body(body, wait)
        return Call(
            "POST",
            self._action(key, self.acquire_action),
            body_now,
            idempotent=False,
            parse=self.grant_type.from_json,
            wait_until=wait_until,
        )

    def renew(self, key: str, ids: Dict[str, Any], ttl: float, **options: Any) -> Call:
        """Extends the lease ``ids`` names to ``ttl`` seconds from now. ``options``: more
        :class:`Call` fields (a lease's renewal sets its own timeout and deadline)."""
        body = dict(ids, ttl_ms=ms(ttl))
        return Call("POST", self._action(key, "renew"), body, parse=self.grant_type.from_json, **options)

    def release(self, key: str, ids: Dict[str, Any], **options: Any) -> Call:
        """Gives the lease ``ids`` names back (one hold of a re-entered lock)."""
        return Call("POST", self._action(key, self.release_action), ids, parse=Released.from_json, **options)

    def status(self, key: str, **options: Any) -> Call:
        """Who holds ``key`` now, and how many wait."""
        return Call("GET", f"/v1/{self.path}/{quote_key(key)}", parse=self.status_type.from_json, **options)

    def history(self, key: str, limit: Optional[int]) -> Call:
        """The latest events of ``key``, newest first (``limit``: 1 to 1000, None: the broker's 100)."""
        if not self.audited:
            raise TypeError(f"the broker keeps no history of {self.noun}s")
        suffix = "" if limit is None else f"?{query({'limit': int(limit)})}"
        return Call(
            "GET",
            f"/v1/{self.path}/{quote_key(key)}/history{suffix}",
            parse=lambda answer: [LockEvent.from_json(e) for e in answer["events"]],
        )

    def page(self, prefix: str, limit: int, cursor: Optional[str]) -> Call:
        """One page of the listing: ``(items, next cursor or None)``."""
        params: Dict[str, Any] = {"prefix": prefix, "limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        return Call(
            "GET",
            f"/v1/{self.path}?{query(params)}",
            parse=lambda page: ([self.status_type.from_json(i) for i in page.get("items") or []], page.get("next")),
        )

    # -- leases ------------------------------------------------------------------

    def ids(self, owner: str, token: int, ids: Dict[str, Any]) -> Dict[str, Any]:
        """What names a lease in its renewals and release: owner, token and the kind's ``id_fields``.

        Raises:
            TypeError: an id field missing, or one this kind does not have.
        """
        missing = [f for f in self.id_fields if ids.get(f) is None]
        unknown = [f for f in ids if f not in self.id_fields]
        if missing or unknown:
            raise TypeError(f"a {self.noun} lease is named by {self.id_fields!r} besides owner and token")
        return {self.owner_field: owner, self.token_field: token, **ids}

    def lease_ids(self, grant: Any) -> Dict[str, Any]:
        """What names the lease of ``grant``."""
        return self.ids(grant.owner, grant.token, {f: getattr(grant, f) for f in self.id_fields})

    def held_by(self, status: Any, owner: str) -> Optional[Dict[str, Any]]:
        """The ids of ``owner``'s lease in ``status``, None if it holds none: how a guard finds out
        whether an acquire it could not see the end of was granted."""
        raise NotImplementedError

    def describe(self, grant: Any) -> str:
        """Names a held lease in logs and reprs (never a secret: owner, token, slot)."""
        ids = self.lease_ids(grant)
        return f"{self.noun} {grant.key!r} " + " ".join(f"{k}={v!r}" for k, v in ids.items())

    def check(self, fields: Dict[str, Any]) -> None:
        """Raises TypeError unless ``fields`` are exactly this kind's ``acquire_fields``."""
        if sorted(fields) != sorted(self.acquire_fields):
            raise TypeError(
                f"a {self.noun} acquire takes {self.acquire_fields!r} besides the terms, not {sorted(fields)!r}"
            )

    def _action(self, key: str, action: str) -> str:
        return f"/v1/{self.path}/{quote_key(key)}/{action}"


class LockSpec(Spec):
    path, noun = "locks", "lock"
    grant_type, status_type = LockGrant, LockStatus

    def validate(self, key: str, token: int) -> Call:
        """Whether ``token`` is the live grant of ``key`` now."""
        return Call("POST", self._action(key, "validate"), {"token": token}, parse=Validity.from_json)

    def held_by(self, status: LockStatus, owner: str) -> Optional[Dict[str, Any]]:
        if status.held and status.owner == owner and status.token is not None:
            return self.ids(owner, status.token, {})
        return None


class SemaphoreSpec(Spec):
    path, noun = "semaphores", "semaphore"
    acquire_fields, id_fields = ("permits",), ("slot",)
    grant_type, status_type = SemaphoreGrant, SemaphoreStatus

    def held_by(self, status: SemaphoreStatus, owner: str) -> Optional[Dict[str, Any]]:
        for holder in status.holders:
            if holder.owner == owner:
                return self.ids(owner, holder.token, {"slot": holder.slot})
        return None


class RwLockSpec(Spec):
    path, noun = "rwlocks", "rwlock"
    acquire_fields = ("mode",)
    grant_type, status_type = RwGrant, RwLockStatus

    def check(self, fields: Dict[str, Any]) -> None:
        super().check(fields)
        if fields["mode"] not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', not {fields['mode']!r}")

    def held_by(self, status: RwLockStatus, owner: str) -> Optional[Dict[str, Any]]:
        for holder in ([status.writer] if status.writer else []) + list(status.readers):
            if holder.owner == owner:
                return self.ids(owner, holder.token, {})
        return None


class ElectionSpec(Spec):
    path, noun = "elections", "election"
    owner_field, token_field = "candidate", "term"
    acquire_action, release_action = "campaign", "resign"
    audited = False
    grant_type, status_type = Term, Leadership

    def release(self, key: str, ids: Dict[str, Any], **options: Any) -> Call:
        """Resigns (the broker answers nothing worth keeping)."""
        return Call("POST", self._action(key, self.release_action), ids, parse=lambda _: None, **options)

    def observe(self, name: str, read_timeout: float, deadline: Optional[float]) -> Call:
        """The stream of ``name``'s leadership: now, then each change (Server-Sent Events)."""
        return Call(
            "GET",
            f"/v1/elections/{quote_key(name)}/observe",
            read_timeout=read_timeout,
            deadline=deadline,
            headers={"Accept": "text/event-stream"},
        )

    def held_by(self, status: Leadership, owner: str) -> Optional[Dict[str, Any]]:
        if status.leader == owner and status.term is not None:
            return self.ids(owner, status.term, {})
        return None


LOCKS, SEMAPHORES, RWLOCKS, ELECTIONS = LockSpec(), SemaphoreSpec(), RwLockSpec(), ElectionSpec()


# -- multi-locks, admin, events ------------------------------------------------------


def acquire_multi(keys: List[str], owner: str, ttl: float, wait: float, session: Optional[str] = None) -> Call:
    """Every lock of ``keys`` for ``owner``, all or none (not idempotent, as any acquire); held
    in the session ``session`` when given, in place of ``ttl``, as :meth:`Spec.acquire`."""
    body = {"keys": list(keys), "owner": owner, **lifetime(ttl, session), "wait_ms": ms(wait)}
    body_now, wait_until = waiting_body(body, wait)
    return Call(
        "POST", "/v1/multilock/acquire", body_now, idempotent=False, parse=MultiLockGrant.from_json, wait_until=wait_until
    )


def renew_multi(owner: str, locks: List[Dict[str, Any]], ttl: float, **options: Any) -> Call:
    body = {"owner": owner, "ttl_ms": ms(ttl), "locks": locks}
    return Call("POST", "/v1/multilock/renew", body, parse=MultiLockGrant.from_json, **options)


def release_multi(owner: str, locks: List[Dict[str, Any]], **options: Any) -> Call:
    return Call(
        "POST",
        "/v1/multilock/release",
        {"owner": owner, "locks": locks},
        parse=lambda answer: [MultiLockReleased.from_json(e) for e in answer.get("locks") or []],
        **options,
    )


def multi_held_by(statuses: List[LockStatus], owner: str) -> List[Dict[str, Any]]:
    """The ``{"key", "token"}`` of each lock of ``statuses`` that ``owner`` holds."""
    return [{"key": s.key, "token": s.token} for s in statuses if LOCKS.held_by(s, owner)]


def force_release(tenant: str, key: str) -> Call:
    """Admin: ends ``tenant``'s live lease of the lock ``key``."""
    path = f"/v1/admin/tenants/{quote_key(tenant)}/locks/{quote_key(key)}/release"
    return Call("POST", path, None, idempotent=False, parse=ForceReleased.from_json)


def events(prefix: str, last_id: Optional[int], read_timeout: float, deadline: Optional[float]) -> Call:
    """The event stream of ``prefix``, resumed after ``last_id`` (``Last-Event-ID``)."""
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    return Call(
        "GET", f"/v1/events?{query({'prefix': prefix})}", read_timeout=read_timeout, deadline=deadline, headers=headers
    )


def lifetime(ttl: float, session: Optional[str]) -> Dict[str, Any]:
    """What an acquire says of how long its lease lives: ``ttl`` seconds of its own, or as long as
    the session ``session`` (its id; the broker refuses both at once)."""
    return {"ttl_ms": ms(ttl)} if session is None else {"session": session}


def own_deadline(timeout: float) -> float:
    """A deadline of its own for a call that must not be cut by the caller's (a release at the
    end of a block, the clean-up after an acquire that was cancelled)."""
    return time.monotonic() + timeout
