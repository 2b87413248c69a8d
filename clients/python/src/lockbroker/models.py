"""Typed answers: one dataclass per JSON body of API.md.

Every model is read by one function, :meth:`Model.from_json`, which ignores
fields it does not know (a broker that adds fields never breaks this
client), fills the ones it does not get with None, parses the times and
builds the nested models a class names in ``_nested``. Times are
timezone-aware ``datetime`` values in UTC, as the broker sends them; they
are the database's clock, not this machine's, so compare them with each
other, not with ``datetime.now()``.

The grants of every kind share :class:`Grant` (``key``, ``owner``,
``token``, ``ttl_ms``, ``expires_at``); an election's :class:`Term` names
them ``name``, ``leader`` and ``term`` as the API does, and answers to the
shared names too.
"""

import dataclasses
import re
from datetime import datetime, timezone
from typing import Any, ClassVar, Dict, List, Optional, Type, TypeVar

M = TypeVar("M", bound="Model")

_FRACTION = re.compile(r"\.(\d+)")

#: Fields holding an RFC 3339 time, whatever the model.
_TIMES = frozenset(("expires_at", "acquired_at", "created_at", "at"))


def parse_time(text: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 time (``2026-11-21T10:00:00.000Z``) as an aware ``datetime``.

    Written out because ``datetime.fromisoformat`` only takes ``Z`` and
    fractions other than 3 or 6 digits from Python 3.11 on.
    """
    if text is None:
        return None
    text = text.replace("Z", "+00:00").replace("z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


class Model:
    """What every answer shares: built from its JSON by :meth:`from_json`."""

    #: Fields holding other models: a JSON list becomes a list of them, an
    #: object one of them, a missing list ``[]``.
    _nested: ClassVar[Dict[str, Type["Model"]]] = {}
    _lists: ClassVar[frozenset] = frozenset()

    @classmethod
    def from_json(cls: Type[M], body: Dict[str, Any]) -> M:
        kwargs = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            value = body.get(field.name)
            if field.name in _TIMES:
                value = parse_time(value)
            elif field.name in cls._nested:
                nested = cls._nested[field.name]
                if field.name in cls._lists:
                    value = [nested.from_json(v) for v in value or []]
                elif value is not None:
                    value = nested.from_json(value)
            kwargs[field.name] = value
        return cls(**kwargs)


# -- grants ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Grant(Model):
    """What every acquire or renewal answers: the lease, its fencing ``token`` and its end."""

    key: str
    storage_key: str
    owner: str
    token: int
    """The fencing token: strictly increases with every grant of the key."""
    ttl_ms: int
    expires_at: Optional[datetime]


@dataclasses.dataclass(frozen=True)
class LockGrant(Grant):
    """A lock acquire or renewal: ``hold_count`` re-entries."""

    hold_count: int


@dataclasses.dataclass(frozen=True)
class SemaphoreGrant(Grant):
    """A semaphore acquire or renewal: one permit (``slot``) of ``permits``, with its own token."""

    slot: int
    permits: int


@dataclasses.dataclass(frozen=True)
class RwGrant(Grant):
    """A rwlock acquire or renewal: ``mode`` is ``"read"`` or ``"write"``; ``readers`` live readers with it (0 for a write)."""

    mode: str
    readers: int


@dataclasses.dataclass(frozen=True)
class Term(Model):
    """A campaign won or an election renewed: ``term`` is the fencing token.

    ``key``, ``owner`` and ``token`` name ``name``, ``leader`` and ``term``
    as every other grant does.
    """

    name: str
    leader: str
    term: int
    ttl_ms: int
    expires_at: Optional[datetime]

    key = property(lambda self: self.name)
    owner = property(lambda self: self.leader)
    token = property(lambda self: self.term)


@dataclasses.dataclass(frozen=True)
class Released(Model):
    """The answer to a release: ``released`` is false while re-entered holds remain."""

    released: bool
    hold_count: int


# -- statuses (also the items of a listing) --------------------------------


@dataclasses.dataclass(frozen=True)
class LockStatus(Model):
    """``GET /v1/locks/{key}`` and one item of ``GET /v1/locks``: a free lock has ``held`` false
    and ``owner``, ``token``, ``hold_count``, ``acquired_at``, ``expires_at`` None."""

    key: str
    storage_key: str
    held: bool
    owner: Optional[str]
    token: Optional[int]
    hold_count: Optional[int]
    acquired_at: Optional[datetime]
    expires_at: Optional[datetime]
    waiters: int
    session: Optional[str] = None
    """The session the lease is held in (``expires_at`` is the session's); None when not held or
    held on its own (and from a broker older than sessions)."""


@dataclasses.dataclass(frozen=True)
class SemaphoreHolder(Model):
    """One live permit in a semaphore's status."""

    slot: int
    owner: str
    token: int
    expires_at: Optional[datetime]
    session: Optional[str] = None
    """The session the permit is held in (``expires_at`` is the session's); None when held on
    its own (and from a broker older than sessions of every kind)."""


@dataclasses.dataclass(frozen=True)
class SemaphoreStatus(Model):
    """``GET /v1/semaphores/{key}`` and one item of its listing: the size (None before the first
    acquire), the holders and the waiters. A listing's items have ``key`` None."""

    key: Optional[str]
    storage_key: str
    permits: Optional[int]
    holders: List[SemaphoreHolder]
    waiters: int

    _nested = {"holders": SemaphoreHolder}
    _lists = frozenset(("holders",))


@dataclasses.dataclass(frozen=True)
class RwHolder(Model):
    """One live lease in a rwlock's status."""

    owner: str
    token: int
    expires_at: Optional[datetime]
    session: Optional[str] = None
    """The session the lease is held in (``expires_at`` is the session's); None when held on its
    own (and from a broker older than sessions of every kind)."""


@dataclasses.dataclass(frozen=True)
class RwLockStatus(Model):
    """``GET /v1/rwlocks/{key}`` and one item of its listing: the writer (or None), the readers,
    and how many wait. A listing's items have ``key`` None."""

    key: Optional[str]
    storage_key: str
    writer: Optional[RwHolder]
    readers: List[RwHolder]
    waiters: int

    _nested = {"writer": RwHolder, "readers": RwHolder}
    _lists = frozenset(("readers",))


@dataclasses.dataclass(frozen=True)
class Leadership(Model):
    """Who leads an election (``GET /v1/elections/{name}``, each ``observe`` event, one item of
    ``GET /v1/elections``, where ``name`` is the storage key).

    ``leader`` and ``term`` are None when nobody leads (resigned, expired, never elected).
    """

    name: str
    storage_key: str
    leader: Optional[str]
    term: Optional[int]
    expires_at: Optional[datetime]


# -- history and events ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LockEvent(Model):
    """One event of a lock's, semaphore's or rwlock's history: ``event`` is ``granted``,
    ``released``, ``expired``, ``handed_off`` or ``force_released``; ``at`` by the database clock
    (for ``expired``, when the lease ran out)."""

    event: str
    owner: str
    token: int
    at: datetime
    session: Optional[str] = None
    """The session the lease was held in; None for a lease of its own."""
    reason: Optional[str] = None
    """Why a lease ended without its holder's release (``session_closed``, ``session_expired``), or None."""


@dataclasses.dataclass(frozen=True)
class Event(Model):
    """One event of ``GET /v1/events``: a change of one of the tenant's locks, semaphores or rwlocks.

    ``event`` as in :class:`LockEvent`, or ``"reset"`` (every other field
    None) when the broker's history no longer reached back to where the
    stream resumed: events were missed. ``kind`` is ``"lock"``,
    ``"semaphore"`` or ``"rwlock"``; ``id`` increases, and resuming
    after it gets the events that follow.
    """

    id: Optional[int]
    event: str
    kind: Optional[str]
    storage_key: Optional[str]
    owner: Optional[str]
    token: Optional[int]
    at: Optional[datetime]


@dataclasses.dataclass(frozen=True)
class Validity(Model):
    """``POST /v1/locks/{key}/validate``: whether the token is the live grant, and which token is (None: not held)."""

    valid: bool
    token: Optional[int]


# -- multi-locks and admin -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MultiLockEntry(Model):
    """One key of a multi-lock, with its own fencing ``token``."""

    key: str
    storage_key: str
    token: int
    hold_count: int
    expires_at: Optional[datetime]


@dataclasses.dataclass(frozen=True)
class MultiLockGrant(Model):
    """The answer to a multi-lock acquire or renew: every key, in storage-key order."""

    owner: str
    ttl_ms: int
    locks: List[MultiLockEntry]

    _nested = {"locks": MultiLockEntry}
    _lists = frozenset(("locks",))

    def token(self, key: str) -> int:
        """The fencing token of ``key`` (as named in the request)."""
        for entry in self.locks:
            if entry.key == key:
                return entry.token
        raise KeyError(key)


@dataclasses.dataclass(frozen=True)
class MultiLockReleased(Model):
    """What a multi-lock release did to one key (``lost``: that token no longer held it)."""

    key: str
    released: bool
    hold_count: int
    lost: bool


@dataclasses.dataclass(frozen=True)
class ForceReleased(Model):
    """The lease an operator's force-release ended."""

    tenant: str
    key: str
    storage_key: str
    owner: str
    token: int
    handed_off: bool


# -- sessions --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SessionInfo(Model):
    """A session (``POST /v1/sessions``, one item of ``GET /v1/sessions``): ``id`` is what an acquire
    names to hold its lease in it; it lives ``ttl_ms`` past its last keepalive (database clock)."""

    id: str
    name: Optional[str]
    ttl_ms: int
    lock_delay_ms: int
    created_at: Optional[datetime]
    expires_at: Optional[datetime]


@dataclasses.dataclass(frozen=True)
class SessionLeaseInfo(Model):
    """One lease held in a session: its ``kind`` (``"lock"``, ``"semaphore"``, ``"rwlock"`` or
    ``"election"``; each key of a multi-lock is a ``"lock"``), ``key`` (the storage key) and
    fencing ``token``; a permit's ``slot``, a rwlock lease's ``mode`` (``"read"``, ``"write"``)."""

    kind: str
    key: str
    storage_key: str
    token: int
    slot: Optional[int] = None
    mode: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SessionStatus(SessionInfo):
    """``GET /v1/sessions/{id}``: the session and every lease held in it."""

    leases: List[SessionLeaseInfo] = dataclasses.field(default_factory=list)

    _nested = {"leases": SessionLeaseInfo}
    _lists = frozenset(("leases",))


@dataclasses.dataclass(frozen=True)
class CycleStep(Model):
    """One step of the cycle a ``DeadlockError`` carries: ``session``, as ``owner``, waits (or, for
    the first step, would wait) for ``storage_key`` of ``kind`` (``"lock"``, ``"election"``,
    ``"semaphore"`` or ``"rwlock"``), which the next step's session holds; the last step's key is
    held by the first step's session."""

    session: str
    owner: str
    kind: str
    storage_key: str


@dataclasses.dataclass(frozen=True)
class SessionKeepalive(Model):
    """A keepalive's answer: the session's new expiry (database clock)."""

    id: str
    expires_at: Optional[datetime]


@dataclasses.dataclass(frozen=True)
class SessionClosed(Model):
    """A close's answer: ``released`` counts the leases it ended."""

    closed: bool
    released: int
