"""The calls of sessions (``/v1/sessions``), as :class:`~lockbroker.wire.Call` values both clients
send: open, keep alive, close, look up, list. A session's handles (``sessionbase.py``) and the
plain calls (``client.sessions``) are built on these; holding a lease in a session is the kind's
acquire with ``session`` (``specs.Spec.acquire``).
"""

from typing import Any, Dict, List, Optional, Tuple

from .models import SessionClosed, SessionInfo, SessionKeepalive, SessionStatus
from .wire import Call, ms, query, quote_key

#: The TTLs the broker accepts (seconds): 1 s to 1 h.
MIN_TTL, MAX_TTL = 1.0, 3600.0


def open_session(ttl: float, name: Optional[str] = None, lock_delay: Optional[float] = None) -> Call:
    """Opens a session that lives ``ttl`` seconds past each keepalive.

    Idempotent as far as retries go: a session opened twice because an answer was lost holds
    nothing and ends by its TTL on its own, so a retry harms nothing (unlike an acquire's).
    """
    body: Dict[str, Any] = {"ttl_ms": ms(ttl)}
    if name is not None:
        body["name"] = name
    if lock_delay is not None:
        body["lock_delay_ms"] = ms(lock_delay)
    return Call("POST", "/v1/sessions", body, parse=SessionInfo.from_json)


def keepalive(session_id: str, **options: Any) -> Call:
    """Extends the session by its TTL from now. ``options``: more :class:`Call` fields (a session's
    own keepalives set their timeout and deadline, and do their own retrying)."""
    return Call("POST", f"/v1/sessions/{quote_key(session_id)}/keepalive", {}, parse=SessionKeepalive.from_json, **options)


def close(session_id: str, **options: Any) -> Call:
    """Ends the session and releases every lease held in it. Repeating it is harmless (the repeat
    answers ``session_not_found``), so it is retried as a release is."""
    return Call("DELETE", f"/v1/sessions/{quote_key(session_id)}", parse=SessionClosed.from_json, **options)


def status(session_id: str) -> Call:
    """The session and every lease held in it."""
    return Call("GET", f"/v1/sessions/{quote_key(session_id)}", parse=SessionStatus.from_json)


def page(prefix: str, limit: int, cursor: Optional[str]) -> Call:
    """One page of the tenant's live sessions whose name starts with ``prefix``, and the next cursor."""
    params: Dict[str, Any] = {"prefix": prefix, "limit": int(limit)}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/v1/sessions?{query(params)}", parse=_page)


class _Listing:
    """The listing's pages, as ``listing.pages`` asks for them of a kind's spec."""

    page = staticmethod(page)


#: What ``listing.pages`` walks to list sessions.
LISTING = _Listing()


def _page(answer: Dict[str, Any]) -> Tuple[List[SessionInfo], Optional[str]]:
    return [SessionInfo.from_json(item) for item in answer.get("items") or []], answer.get("next")


def check_ttl(ttl: float) -> None:
    """Raises ValueError for a TTL the broker refuses, before anything is sent."""
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise ValueError(f"a session's ttl is {MIN_TTL} to {MAX_TTL} seconds, not {ttl!r}")
