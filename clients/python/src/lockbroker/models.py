"""Typed answers: one dataclass per JSON body of API.md.

Built with ``from_json``, which ignores fields it does not know, so a broker
that adds fields never breaks this client. Times are timezone-aware
``datetime`` values in UTC, as the broker sends them; they are the database's
clock, not this machine's, so compare them with each other, not with
``datetime.now()``.
"""

import dataclasses
import re
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")

_FRACTION = re.compile(r"\.(\d+)")


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


def _from_json(cls: Type[T], body: Dict[str, Any]) -> T:
    kwargs = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = body.get(field.name)
        if field.name == "expires_at":
            value = parse_time(value)
        kwargs[field.name] = value
    return cls(**kwargs)


@dataclasses.dataclass(frozen=True)
class LockGrant:
    """The answer to a lock acquire or renew."""

    key: str
    storage_key: str
    owner: str
    token: int
    """The fencing token: strictly increases with every grant of the key."""
    hold_count: int
    ttl_ms: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "LockGrant":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class Released:
    """The answer to a release: ``released`` is false while re-entered holds remain."""

    released: bool
    hold_count: int

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Released":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class LockStatus:
    """``GET /v1/locks/{key}``: a free lock has ``held`` false and ``owner``, ``token``, ``expires_at`` None."""

    key: str
    storage_key: str
    held: bool
    owner: Optional[str]
    token: Optional[int]
    expires_at: Optional[datetime]
    waiters: int

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "LockStatus":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class SemaphoreGrant:
    """The answer to a semaphore acquire or renew: one permit (``slot``) with its own token."""

    key: str
    storage_key: str
    owner: str
    slot: int
    permits: int
    token: int
    ttl_ms: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SemaphoreGrant":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class SemaphoreHolder:
    """One live permit in a semaphore's status."""

    slot: int
    owner: str
    token: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SemaphoreHolder":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class SemaphoreStatus:
    """``GET /v1/semaphores/{key}``: the size (None before the first acquire) and the holders."""

    key: str
    storage_key: str
    permits: Optional[int]
    holders: List[SemaphoreHolder]
    waiters: int

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SemaphoreStatus":
        status = _from_json(cls, body)
        holders = [SemaphoreHolder.from_json(h) for h in body.get("holders") or []]
        return dataclasses.replace(status, holders=holders)


@dataclasses.dataclass(frozen=True)
class RwGrant:
    """The answer to a rwlock acquire or renew: ``mode`` is ``"read"`` or ``"write"``; ``readers`` live readers with it (0 for a write)."""

    key: str
    storage_key: str
    owner: str
    mode: str
    token: int
    ttl_ms: int
    expires_at: Optional[datetime]
    readers: int

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RwGrant":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class RwHolder:
    """One live lease in a rwlock's status."""

    owner: str
    token: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RwHolder":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class RwLockStatus:
    """``GET /v1/rwlocks/{key}``: the writer (or None), the readers, and how many wait."""

    key: str
    storage_key: str
    writer: Optional[RwHolder]
    readers: List[RwHolder]
    waiters: int

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RwLockStatus":
        status = _from_json(cls, body)
        writer = body.get("writer")
        readers = [RwHolder.from_json(r) for r in body.get("readers") or []]
        return dataclasses.replace(
            status, writer=RwHolder.from_json(writer) if writer else None, readers=readers
        )


@dataclasses.dataclass(frozen=True)
class Term:
    """The answer to a campaign or an election renewal: ``term`` is the fencing token."""

    name: str
    leader: str
    term: int
    ttl_ms: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Term":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class Leadership:
    """Who leads an election (``GET /v1/elections/{name}``, and each ``observe`` event).

    ``leader`` is None when nobody does (resigned, expired, never elected).
    """

    name: str
    leader: Optional[str]
    term: Optional[int]
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Leadership":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class Validity:
    """``POST /v1/locks/{key}/validate``: whether the token is the live grant, and which token is (None: not held)."""

    valid: bool
    token: Optional[int]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Validity":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class LockEvent:
    """One event of a lock's history: ``event`` is ``granted``, ``released``, ``expired``,
    ``handed_off`` or ``force_released``; ``at`` by the database clock (for ``expired``, when the
    lease ran out)."""

    event: str
    owner: str
    token: int
    at: datetime

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "LockEvent":
        return cls(event=body["event"], owner=body["owner"], token=body["token"], at=parse_time(body["at"]))


@dataclasses.dataclass(frozen=True)
class MultiLockEntry:
    """One key of a multi-lock, with its own fencing ``token``."""

    key: str
    storage_key: str
    token: int
    hold_count: int
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "MultiLockEntry":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class MultiLockGrant:
    """The answer to a multi-lock acquire or renew: every key, in storage-key order."""

    owner: str
    ttl_ms: int
    locks: List[MultiLockEntry]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "MultiLockGrant":
        grant = _from_json(cls, body)
        locks = [MultiLockEntry.from_json(entry) for entry in body.get("locks") or []]
        return dataclasses.replace(grant, locks=locks)

    def token(self, key: str) -> int:
        """The fencing token of ``key`` (as named in the request)."""
        for entry in self.locks:
            if entry.key == key:
                return entry.token
        raise KeyError(key)


@dataclasses.dataclass(frozen=True)
class MultiLockReleased:
    """What a multi-lock release did to one key (``lost``: that token no longer held it)."""

    key: str
    released: bool
    hold_count: int
    lost: bool

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "MultiLockReleased":
        return _from_json(cls, body)


@dataclasses.dataclass(frozen=True)
class ForceReleased:
    """The lease an operator's force-release ended."""

    tenant: str
    key: str
    storage_key: str
    owner: str
    token: int
    handed_off: bool

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ForceReleased":
        return _from_json(cls, body)
