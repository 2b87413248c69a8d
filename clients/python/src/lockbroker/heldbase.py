"""What a held lease is to both clients: the parts of their handles that do not wait.

The sync handles (``handles.py``) and the async ones (``aio/handles.py``) are these classes
with a ``lost`` event, a renewer and ``release``/``close`` of their own kind (a thread and
``with``; a task and ``async with``). Here, once for both:

- :class:`HeldBase`: what a held thing tells (``held_until``, ``renewals``,
  ``lost_reason``, ``raise_if_lost``) and its release as a plan (``steps.py``): once,
  after the renewer stopped; a lease already known lost is no longer the broker's to give
  back;
- :class:`LeaseBase`: a lease of one key, made from its grant, renewed and released by its
  kind; :class:`MultiLeaseBase` the same for a multi-lock, by its client (its fields:
  :class:`MultiFields`, which a multi-lock held in a session shares);
- :class:`PermitFields`, :class:`RwFields`, :class:`LeaderFields`: what a kind's handle adds.
"""

import logging
import threading
from typing import Any, Callable, Dict, List, Optional

from .clock import LeaseClock
from .errors import LeaseLost, LockbrokerError
from .models import Grant, MultiLockGrant
from .renewing import Keeping
from .steps import Invoke, Plan

log = logging.getLogger("lockbroker")


class HeldBase:
    """Something held: renewed in the background until released (see the front ends' ``lost``)."""

    lost: Any
    _renewer: Keeping

    def _begin(self, what: str, release: Callable[[], Any], renewer: Keeping) -> None:
        """Set up by the front end's ``__init__``, once ``lost`` is made."""
        self._what = what
        self._release = release
        self._renewer = renewer
        self._released = False
        self._guard = threading.Lock()  # two threads may release one lease; no `await` is held under it

    @property
    def held_until(self) -> float:
        """The ``time.monotonic()`` instant until which the lease is surely held: when the request
        of its last confirmed grant or renewal was sent, plus the TTL (``clock.py``)."""
        return self._renewer.clock.held_until

    @property
    def renewals(self) -> int:
        """How many renewals the broker has confirmed so far."""
        return self._renewer.renewals

    @property
    def lost_reason(self) -> Optional[LockbrokerError]:
        """The failure that made the lease lost (None while it is held, or when lost on release)."""
        return self._renewer.last_error

    def raise_if_lost(self) -> None:
        """Raises :class:`LeaseLost` if the lease was lost: a check to put between steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(None, "lease_lost", f"the lease was lost: {self.lost_reason}")

    def _releasing(self) -> Plan[Any]:
        """The release (see the front ends' ``release``): stops the renewer, then releases, once."""
        with self._guard:
            if self._released:
                return None
            self._released = True
        yield Invoke(self._renewer.stop)
        try:
            return (yield Invoke(self._release))
        except LeaseLost:
            if self.lost.is_set():  # known already: nothing of ours to give back
                return None
            self.lost.set()
            raise

    def _closing(self) -> Plan[None]:
        """The release that never raises a broker error: a lease that cannot be released ends by
        its TTL; the failure is logged on the ``lockbroker`` logger."""
        try:
            yield from self._releasing()
        except LockbrokerError as err:
            log.warning("lockbroker: releasing %s failed (it ends by its TTL): %s", self._what, err)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._what}, lost={self.lost.is_set()})"


class LeaseBase:
    """A held lease of one key of any kind, made from its ``grant`` and bound to its ``kind``,
    which renews and releases it (its ``renew_once`` and ``release_ids``).

    ``key``, ``owner`` and ``token`` (the fencing token: pass it to what the
    lease protects) are the grant's; ``grant`` is the whole answer of the
    acquire (:class:`LockGrant`, :class:`SemaphoreGrant`, ...).
    """

    def __init__(self, kind: Any, grant: Grant, ttl: float, confirmed_at: float) -> None:
        self.grant = grant
        self.key: str = grant.key
        self.owner: str = grant.owner
        self.token: int = grant.token
        ids = kind.spec.lease_ids(grant)
        client = kind.client
        super().__init__(  # type: ignore[call-arg]  # the front end's Held
            kind.spec.describe(grant),
            LeaseClock(ttl, confirmed_at, client.timeout, client.backoff),
            lambda read_timeout, deadline: kind.renew_once(grant.key, ids, ttl, read_timeout, deadline),
            lambda: kind.release_ids(grant.key, ids),
        )


class MultiFields:
    """What a held multi-lock tells: ``owner``, ``keys`` (as named), ``tokens`` (each key's own
    fencing token: pass each to what that key protects) and ``grant``, the acquire's answer."""

    def _take(self, grant: MultiLockGrant) -> List[Dict[str, Any]]:
        """Sets the fields from ``grant``; gives what names its leases in a release
        (``[{"key", "token"}]``)."""
        self.owner = grant.owner
        self.keys = [entry.key for entry in grant.locks]
        self.tokens: Dict[str, int] = {entry.key: entry.token for entry in grant.locks}
        self.grant = grant
        return [{"key": e.key, "token": e.token} for e in grant.locks]

    def _described(self) -> str:
        return f"multi-lock {self.tokens!r} owner={self.owner!r}"


class MultiLeaseBase(MultiFields):
    """Several locks held together (a multi-lock), renewed and released as one by their
    ``client`` (its ``_renew_multi_once`` and ``_release_multi_own``).

    ``tokens`` maps each key (as named) to its own fencing token; pass each
    to what that key protects.
    """

    def __init__(self, client: Any, grant: MultiLockGrant, ttl: float, confirmed_at: float) -> None:
        owner, held = grant.owner, self._take(grant)
        super().__init__(  # type: ignore[call-arg]  # the front end's Held
            self._described(),
            LeaseClock(ttl, confirmed_at, client.timeout, client.backoff),
            lambda read_timeout, deadline: client._renew_multi_once(owner, held, ttl, read_timeout, deadline),
            lambda: client._release_multi_own(owner, held),
        )


class PermitFields:
    """A held semaphore permit: ``slot`` (0 to permits - 1) and its own fencing ``token``."""

    grant: Any

    @property
    def slot(self) -> int:
        return self.grant.slot


class RwFields:
    """A held read or write lease of a reader-writer lock (``mode``)."""

    grant: Any

    @property
    def mode(self) -> str:
        return self.grant.mode


class LeaderFields:
    """Leadership of an election ``name``, won by ``candidate``; ``term`` is the fencing token."""

    key: str
    owner: str
    token: int

    @property
    def name(self) -> str:
        return self.key

    @property
    def candidate(self) -> str:
        return self.owner

    @property
    def term(self) -> int:
        return self.token
