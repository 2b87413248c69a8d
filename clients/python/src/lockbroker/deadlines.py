"""The caller's deadline: how long the calls of a block may take in all, retries included.

A deadline is set for a block, not passed to every call, like a Go
``context``'s: ``with lockbroker.deadline(2.0): client.locks.status(key)``.
It is a context variable, so it holds for the thread (sync client) or the
asyncio task (async client) that set it, and for nothing else; a lease's
renewals and its release at the end of a ``with`` block give themselves
deadlines of their own and are not cut short by the caller's.

Within a deadline a call:

- starts no retry (after a ``503``, a connection failure or a ``429``)
  whose delay would end past it, and raises the error it has instead
  (``Unavailable``, ``Unreachable``, ``RateLimited`` with its
  ``retry_after_ms``);
- waits for an answer no longer than it (a call cut off so, if not safe to
  repeat, raises ``OutcomeUnknown``);
- if it is a waiting acquire, asks the broker to wait only until shortly
  before it, so that ``LockHeld`` comes back in time.
"""

import contextlib
import contextvars
import time
from typing import Iterator, Optional

_DEADLINE: "contextvars.ContextVar[Optional[float]]" = contextvars.ContextVar("lockbroker_deadline", default=None)

#: How much of a deadline a waiting acquire leaves for the broker's answer to arrive.
ANSWER_GRACE = 0.2


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Bounds every call made in the block to ``seconds`` from now (an enclosing deadline that
    ends sooner still holds). Yields the deadline as a ``time.monotonic()`` instant::

        with lockbroker.deadline(5.0):
            lease = client.lock("nightly", ttl=30, wait=60)   # LockHeld after ~5 s, not 60
    """
    until = time.monotonic() + max(0.0, seconds)
    outer = _DEADLINE.get()
    if outer is not None:
        until = min(until, outer)
    token = _DEADLINE.set(until)
    try:
        yield until
    finally:
        _DEADLINE.reset(token)


def current() -> Optional[float]:
    """The deadline of the enclosing :func:`deadline` block (a ``time.monotonic()`` instant), or None."""
    return _DEADLINE.get()
