"""The broker's error answers as Python exceptions.

Every error the broker sends is JSON ``{"error": {"code", "message",
"retry_after_ms"?}}``; the ``code`` decides the exception class, so callers
catch what they can act on (``LockHeld``: try later; ``LeaseLost``: your
critical section may have overlapped someone else's) without parsing text.
Unknown codes still raise :class:`LockbrokerError`, so a newer broker never
breaks an older client.
"""

from typing import Any, Dict, List, Optional, Type

from .models import CycleStep


class LockbrokerError(Exception):
    """Any failure of a broker call.

    Attributes:
        status: the HTTP status (``None`` when the broker was not reached).
        code: the broker's error code (``"lock_held"``, ``"lease_lost"``...).
        message: the broker's explanation, for people.
        retry_after_ms: the tenant's backoff hint, when the broker gave one.
    """

    def __init__(
        self,
        status: Optional[int],
        code: str,
        message: str,
        retry_after_ms: Optional[int] = None,
    ) -> None:
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class BadRequest(LockbrokerError):
    """400 ``bad_request``: malformed JSON, a missing field, a value out of range."""


class InvalidKey(BadRequest):
    """422 ``invalid_key``: the tenant's naming policy rejected the key."""


class TooLarge(BadRequest):
    """413 ``too_large``: the request body is over the broker's limit."""


class Unauthenticated(LockbrokerError):
    """401 ``unauthenticated``: no API key, or one the broker does not know."""


class Forbidden(LockbrokerError):
    """403 ``forbidden``: the key is valid but not allowed here (a tenant key on the admin API)."""


class NotFound(LockbrokerError):
    """404 ``not_found``: no such path (a broker without this feature)."""


class SessionNotFound(NotFound):
    """404 ``session_not_found``: the session is unknown, closed or expired (by the database
    clock), or another tenant's. Every lease it held is gone; an acquire naming it granted nothing."""


class Busy(LockbrokerError):
    """409, the resource is taken by others: wait or try again later.

    ``retry_after_ms`` says when, by the tenant's backoff policy.
    """


class LockHeld(Busy):
    """409 ``lock_held``: another owner holds the lock (or the election)."""


class SemaphoreFull(Busy):
    """409 ``semaphore_full``: every permit of the semaphore is taken."""


class DeadlockError(Busy):
    """409 ``deadlock``: a session's waiting acquire was refused at once, because its wait would
    close a cycle of sessions waiting for each other.

    Nothing was granted or queued, and it is never retried: the same wait is
    refused again until one session of the cycle lets go (release what this
    session holds, or close it, then try again; or take keys in one order).

    Attributes:
        cycle: the cycle, as :class:`~lockbroker.models.CycleStep` values: each a session, as
            an owner, waiting for a key that the next step's session holds; the last step's
            key is held by the first's. The first step is the refused wait itself.
    """

    def __init__(
        self,
        status: Optional[int],
        code: str,
        message: str,
        retry_after_ms: Optional[int] = None,
        cycle: Optional[List[CycleStep]] = None,
    ) -> None:
        super().__init__(status, code, message, retry_after_ms)
        self.cycle: List[CycleStep] = list(cycle or [])


class PermitsMismatch(LockbrokerError):
    """409 ``permits_mismatch``: the semaphore exists with another size."""


class LeaseLost(LockbrokerError):
    """409 ``lease_lost``: this owner and token do not hold the lease.

    It expired (judged by the database clock), was released or re-granted,
    or was never held. Work done under it may have overlapped another
    holder's.
    """


NotOwner = LeaseLost
"""Another name for :class:`LeaseLost`: the broker answers both cases with one code."""


class TooManyWaiters(LockbrokerError):
    """429 ``too_many_waiters``: the tenant has its maximum of queued requests."""


class TooManyStreams(TooManyWaiters):
    """429 ``too_many_streams``: the tenant has its maximum of open event streams on this broker."""


class QuotaExceeded(TooManyWaiters):
    """429 ``quota_exceeded``: the grant would take the tenant past ``max_held`` live leases."""


class RateLimited(TooManyWaiters):
    """429 ``rate_limited``: the tenant sent more than ``max_requests_per_s``; see ``retry_after_ms``."""


class PolicyError(LockbrokerError):
    """500 ``policy_error``: the tenant's policy failed; the request was refused (fail closed)."""


class Unavailable(LockbrokerError):
    """503 ``unavailable`` (the broker's database is down), after the client's retries.

    Nothing was granted that the database did not commit.
    """


class DeadlineExceeded(Unavailable):
    """The caller's deadline (``lockbroker.deadline``) had passed before the call could be sent.

    ``status`` is ``None``; nothing was sent.
    """


class Unreachable(Unavailable):
    """The broker could not be reached (connection refused, reset or timed out), after retries.

    ``status`` is ``None``. For a release, the broker may or may not have
    done it; the lease runs out by its TTL either way.
    """


class OutcomeUnknown(Unreachable):
    """A call that is not safe to repeat (an acquire, a campaign) was sent, and the connection
    broke or timed out before its answer: the broker may or may not have carried it out.

    It is not sent again (the same owner would re-enter what it may hold).
    A guard (``client.lock(...)`` with its own owner) has looked for the
    lease and released it if it was granted before this is raised; after a
    plain ``acquire``, look at ``status(key)`` for your owner.
    """


class TlsError(Unreachable):
    """The TLS handshake failed: the broker's certificate is not trusted (``ca_file``), or the
    broker refused this client's certificate (none, or one of a CA it does not trust).

    Never retried: the same certificates would fail the same way. ``status`` is ``None``.
    """


_BY_CODE: Dict[str, Type[LockbrokerError]] = {
    "bad_request": BadRequest,
    "invalid_key": InvalidKey,
    "too_large": TooLarge,
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "session_not_found": SessionNotFound,
    "lock_held": LockHeld,
    "semaphore_full": SemaphoreFull,
    "deadlock": DeadlockError,
    "permits_mismatch": PermitsMismatch,
    "lease_lost": LeaseLost,
    "too_many_waiters": TooManyWaiters,
    "too_many_streams": TooManyStreams,
    "quota_exceeded": QuotaExceeded,
    "rate_limited": RateLimited,
    "policy_error": PolicyError,
    "unavailable": Unavailable,
}

_BY_STATUS: Dict[int, Type[LockbrokerError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    413: TooLarge,
    422: InvalidKey,
    429: TooManyWaiters,
    503: Unavailable,
}


def error_for(
    status: int,
    code: str,
    message: str,
    retry_after_ms: Optional[int] = None,
    detail: Optional[Dict[str, Any]] = None,
) -> LockbrokerError:
    """The exception for one error answer: by code, else by status, else the base class.

    ``detail``: the answer's whole ``error`` object, for what a code adds (a ``deadlock``'s
    ``cycle``, read as :class:`CycleStep` values; steps that are not objects are skipped).
    """
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or LockbrokerError
    if cls is DeadlockError:
        steps = (detail or {}).get("cycle")
        cycle = [CycleStep.from_json(step) for step in steps if isinstance(step, dict)] if isinstance(steps, list) else []
        return DeadlockError(status, code, message, retry_after_ms, cycle)
    return cls(status, code, message, retry_after_ms)
