"""A guard's acquire, of one key or of a multi-lock, as a plan (``steps.py``) for both clients:
what it sends, and what it gives back when it is interrupted.

An acquire interrupted after it was sent (a broken connection: ``OutcomeUnknown``; in the
sync client ``KeyboardInterrupt`` or an exception raised by a signal handler; in the async
one the task cancelled) leaves no lease behind, if the guard made up its owner: it looks the
key up for that owner and releases what was granted meanwhile (best effort, each call within a
deadline of its own; what is left ends by its TTL), then lets the exception pass. The look-up
is a :class:`~lockbroker.steps.Shield` step: in the async client a second cancellation does
not cut it short. With an owner of the caller's, nothing is given back: the caller may hold
that lease from before.
"""

import logging
import os
import socket
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, TypeVar

from . import specs
from .errors import Busy, LockbrokerError, OutcomeUnknown
from .exchange import Exchange
from .models import MultiLockGrant
from .specs import LOCKS, Spec, own_deadline
from .steps import Plan, Shield

log = logging.getLogger("lockbroker")

T = TypeVar("T")

#: Makes the held handle of a grant: ``(grant, ttl, confirmed_at)``, ``confirmed_at`` when its
#: request was sent (``clock.py``).
MakeHeld = Callable[[Any, float, float], T]


def default_owner() -> str:
    """``host:pid:uuid``: unique per call, so two ``with`` blocks of one process never re-enter each other's lock."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def hold(
    exchange: Exchange,
    spec: Spec,
    key: str,
    ttl: float,
    wait: float,
    owner: Optional[str],
    priority: int,
    fields: Dict[str, Any],
    make: MakeHeld[T],
    session: Optional[str] = None,
) -> Plan[T]:
    """Acquires ``key`` of the kind ``spec`` for ``owner`` (None: a new ``host:pid:uuid``, given
    back if interrupted), waiting up to ``wait`` seconds, and gives the held handle ``make``
    makes of the grant. ``fields``: what the kind's acquire needs besides the terms;
    ``session``: the id of the session to hold it in (``ttl`` unused then).

    Raises:
        TypeError, ValueError: ``fields`` are not the kind's (before anything is sent: a
            mistake is not an interrupted acquire).
        Busy: still taken by others after ``wait``.
        OutcomeUnknown: the connection broke after the acquire was sent.
    """
    spec.check(fields)
    fresh = owner is None
    owner = owner or default_owner()
    call = spec.acquire(key, owner, ttl, wait, priority, fields, exchange.timeout, session)
    sent = time.monotonic()
    grant = None
    try:
        grant = yield from exchange.call(call)
        return make(grant, ttl, sent)
    except LockbrokerError as err:
        if fresh and isinstance(err, OutcomeUnknown):
            yield Shield(give_back(exchange, spec, key, owner))
        raise
    except GeneratorExit:  # abandoned by its runner: nothing can be sent any more
        raise
    except BaseException:  # KeyboardInterrupt, CancelledError above all
        if grant is not None:  # granted, but the handle was not made
            yield Shield(release_quietly(exchange, spec, key, spec.lease_ids(grant)))
        elif fresh:
            yield Shield(give_back(exchange, spec, key, owner))
        raise


def give_back(exchange: Exchange, spec: Spec, key: str, owner: str) -> Plan[None]:
    """After an acquire whose answer was not seen: releases what ``owner`` holds of ``key`` now,
    if anything (best effort; what is left ends by its TTL)."""
    try:
        status = yield from exchange.call(spec.status(key, deadline=own_deadline(exchange.timeout)))
        ids = spec.held_by(status, owner)
    except LockbrokerError as err:
        log.warning(
            "lockbroker: could not find out whether %s %r was granted (if so it ends by its TTL): %s",
            spec.noun,
            key,
            err,
        )
        return
    if ids is not None:
        yield from release_quietly(exchange, spec, key, ids)


def release_quietly(exchange: Exchange, spec: Spec, key: str, ids: Dict[str, Any]) -> Plan[None]:
    """Releases the lease ``ids`` names after an interrupted acquire; a failure is logged."""
    try:
        yield from exchange.call(spec.release(key, ids, deadline=own_deadline(exchange.timeout)))
    except LockbrokerError as err:
        log.warning(
            "lockbroker: releasing %s %r after an interrupted acquire failed (it ends by its TTL): %s",
            spec.noun,
            key,
            err,
        )


def hold_multi(
    exchange: Exchange,
    keys: List[str],
    ttl: float,
    wait: float,
    owner: Optional[str],
    make: MakeHeld[T],
    session: Optional[str] = None,
) -> Plan[T]:
    """Takes every lock of ``keys`` at once, waiting up to ``wait`` seconds, and gives the held
    handle ``make`` makes of the grant; interrupted, gives back as :func:`hold` does.
    ``session``: the id of the session to hold them in (``ttl`` unused then).

    Raises:
        LockHeld: some key stayed busy after ``wait`` (none is held).
    """
    fresh = owner is None
    owner = owner or default_owner()
    call = specs.acquire_multi(keys, owner, ttl, wait, session)
    sent = time.monotonic()
    try:
        grant: MultiLockGrant = yield from exchange.call(call)
    except LockbrokerError as err:
        if fresh and isinstance(err, OutcomeUnknown):
            yield Shield(give_back_multi(exchange, keys, owner))
        raise
    except GeneratorExit:
        raise
    except BaseException:
        if fresh:
            yield Shield(give_back_multi(exchange, keys, owner))
        raise
    return make(grant, ttl, sent)


def give_back_multi(exchange: Exchange, keys: List[str], owner: str) -> Plan[None]:
    """After a multi-lock acquire whose answer was not seen: releases the keys ``owner`` holds
    now, if any (best effort)."""
    deadline = own_deadline(exchange.timeout)
    try:
        statuses = []
        for key in keys:
            statuses.append((yield from exchange.call(LOCKS.status(key, deadline=deadline))))
        held = specs.multi_held_by(statuses, owner)
        if held:
            yield from exchange.call(specs.release_multi(owner, held, deadline=deadline))
    except LockbrokerError as err:
        log.warning("lockbroker: could not give back an interrupted multi-lock (it ends by its TTL): %s", err)


def trying(plan: Plan[T]) -> Plan[Optional[T]]:
    """``plan``'s result, or None when it raises ``Busy`` (what the ``try_`` guards give)."""
    try:
        return (yield from plan)
    except Busy:
        return None

