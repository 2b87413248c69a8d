"""A kind's listing, page after page, as a plan (``steps.py``) that emits each item: what
``list`` is in both clients (an iterator in the sync one, an async iterator in the other).

A page is asked for only when the items before it have been taken, and no more are asked for
than ``limit`` leaves; each next page follows the cursor of the last. One live for the whole
scan is given exactly once; one granted or released meanwhile may or may not be.
"""

from typing import Optional, Protocol

from .exchange import Exchange
from .steps import Emit, Plan
from .wire import Call


class Paged(Protocol):
    """What is listed page by page: a kind's spec, or the sessions (``sessionspecs.LISTING``)."""

    def page(self, prefix: str, limit: int, cursor: Optional[str]) -> Call: ...


def pages(exchange: Exchange, spec: Paged, prefix: str, limit: Optional[int], page_size: int) -> Plan[None]:
    """Emits the live ones of the kind ``spec`` (or the sessions) whose storage key (name) starts
    with ``prefix``, in that order, at most ``limit`` (None: all), fetching ``page_size`` at a time."""
    left, cursor = limit, None
    while left is None or left > 0:
        items, cursor = yield from exchange.call(spec.page(prefix, page_size if left is None else min(page_size, left), cursor))
        for item in items:
            yield Emit(item)
            if left is not None:
                left -= 1
                if left == 0:
                    return
        if cursor is None:
            return
