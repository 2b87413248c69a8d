"""When a failed call is tried again, and after how long: one set of rules for both clients.

What may be retried follows what the broker promises (API.md, "Errors"):

- ``503 unavailable`` never hides a grant: any call may be tried again;
- ``429 rate_limited`` and ``429 quota_exceeded`` were refused before
  anything was done: tried again, but not before the broker's
  ``retry_after_ms`` (or ``Retry-After``) has passed;
- a connection that could not be opened carried nothing: any call;
- a connection that broke (or timed out) *after* the request was sent may
  have been carried out: only calls safe to repeat (``idempotent``: reads,
  renewals, releases), never an acquire (``OutcomeUnknown`` instead);
- other ``4xx`` answers, ``too_many_waiters`` included, are final: asking
  again gets the same answer. A TLS handshake refused is final too.

Delays grow exponentially from ``backoff`` to ``max_backoff``, with jitter
(so that clients refused together do not come back together), and are at
least the broker's hint. No retry starts whose delay would end past the
caller's deadline (``deadlines.py``): the error is raised at once instead.
"""

import random
import ssl
from typing import Optional

from .errors import LockbrokerError, OutcomeUnknown, Unavailable, Unreachable

#: The 429 codes that are waited out and retried.
RETRIED_429 = frozenset(("rate_limited", "quota_exceeded"))

#: The longest hint a call waits out; a longer ``retry_after_ms`` raises at once (the caller decides).
MAX_RETRY_AFTER = 10.0


def retryable_answer(error: LockbrokerError) -> bool:
    """Whether a broker's error answer may be retried: 503, and the 429s of :data:`RETRIED_429`."""
    return error.status == 503 or (error.status == 429 and error.code in RETRIED_429)


class RetryPolicy:
    """How often and after how long a retryable failure is tried again.

    Args:
        retries: how many times a call is tried again (0: never).
        backoff: the first delay, in seconds; doubled each time.
        max_backoff: the longest delay, before jitter.
    """

    def __init__(self, retries: int, backoff: float, max_backoff: float) -> None:
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.max_backoff = max_backoff

    def __repr__(self) -> str:
        return f"RetryPolicy(retries={self.retries}, backoff={self.backoff}, max_backoff={self.max_backoff})"

    def backoff_delay(self, attempt: int) -> float:
        """The jittered delay before retry number ``attempt`` (1, 2, ...): half to all of
        ``backoff * 2 ** (attempt - 1)``, at most ``max_backoff``."""
        delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return delay * random.uniform(0.5, 1.0)

    def delay(
        self, error: LockbrokerError, attempt: int, now: float, deadline: Optional[float], retries: Optional[int] = None
    ) -> float:
        """The delay before retry number ``attempt`` after the retryable ``error``.

        Args:
            now: ``time.monotonic()``.
            deadline: the call's deadline (a ``time.monotonic()`` instant), or None.
            retries: this call's retry budget, if not the client's.

        Raises:
            LockbrokerError: ``error`` itself, when there is no retry left, its
                hint is longer than :data:`MAX_RETRY_AFTER` (a 429), or the
                delay would end past the deadline.
        """
        if attempt > (self.retries if retries is None else retries):
            raise error
        delay = self.backoff_delay(attempt)
        hint = None if error.retry_after_ms is None else error.retry_after_ms / 1000.0
        if hint is not None:
            if error.status == 429 and hint > MAX_RETRY_AFTER:
                raise error
            delay = max(delay, min(hint, MAX_RETRY_AFTER))
        if deadline is not None and now + delay >= deadline:
            raise error
        return delay


def transient(error: LockbrokerError) -> bool:
    """Whether a failed renewal may still pass: the broker was unavailable or unreachable, or
    throttled the call; any other answer means the lease is gone."""
    return isinstance(error, Unavailable) or retryable_answer(error)


class Retryable(Exception):
    """Internal to ``exchange.py``: a failure that may be tried again, carrying what to raise if not."""

    def __init__(self, error: LockbrokerError) -> None:
        super().__init__(str(error))
        self.error = error


def broken_after_send(idempotent: bool, message: str) -> Exception:
    """What a call whose connection broke (or timed out) after it was sent becomes: a
    :class:`Retryable` ``Unreachable`` if it is safe to repeat, else ``OutcomeUnknown``."""
    if idempotent:
        return Retryable(Unreachable(None, "unreachable", message))
    return OutcomeUnknown(None, "outcome_unknown", f"{message}; it may have been carried out (not sent again)")


#: How long a TLS probe (``exchange.py``'s ``_tls_refusal``) waits for the broker's word after
#: a handshake: a refusal comes at once, an acceptance is silence.
TLS_PROBE_WAIT = 0.5


def tls_broke(err: BaseException) -> bool:
    """Whether a TLS error is the connection breaking (an EOF, a reset), not a refusal of a
    certificate (which raises ``TlsError``, final)."""
    return isinstance(err, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError))


def tls_refused(err: BaseException) -> bool:
    """Whether an I/O failure is a TLS handshake refused (the broker's certificate not trusted,
    or this client's refused): final, ``TlsError``. A TLS connection that broke is not."""
    return isinstance(err, ssl.SSLError) and not tls_broke(err)
