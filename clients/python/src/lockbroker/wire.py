"""The HTTP exchange, apart from who sends it: what a call is, its headers, key and query
encoding, and the exception an error answer becomes. Both transports (``transport.py``,
``aio/http.py``) send :class:`Call` values and read answers with these functions.
"""

import dataclasses
import email.utils
import json
import time
import urllib.parse
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import deadlines
from ._version import __version__
from .errors import LockbrokerError, Unavailable, error_for

USER_AGENT = f"lockbroker-python/{__version__}"

#: A request body, or a function that makes it afresh for each try (a
#: waiting acquire asks each time for only what is left of its wait).
Body = Union[None, Dict[str, Any], Callable[[], Dict[str, Any]]]

#: The shortest time given to one read (0 would make a socket non-blocking).
MIN_TIMEOUT = 0.01


def _as_is(answer: Dict[str, Any]) -> Any:
    return answer


@dataclasses.dataclass
class Call:
    """One API call, as both transports send it.

    Attributes:
        method, path: ``POST``, ``/v1/locks/k/acquire`` (below the URL's
            prefix, with its query).
        body: the JSON body (see :data:`Body`).
        idempotent: whether repeating it after its connection broke
            mid-request is harmless (``retry.py``).
        parse: makes the typed answer of the 2xx JSON body.
        wait_until: a waiting acquire's end (``time.monotonic()``): its
            answer may take until then, plus the client's timeout.
        read_timeout: seconds to wait for the answer, instead of the
            client's timeout (a renewal: until its lease would be lost).
        retries: this call's retry budget, instead of the client's.
        deadline: this call's own deadline; None: the caller's
            (``deadlines.current()``).
        headers: more request headers (an event stream's ``Last-Event-ID``).
    """

    method: str
    path: str
    body: Body = None
    idempotent: bool = True
    parse: Callable[[Dict[str, Any]], Any] = _as_is
    wait_until: Optional[float] = None
    read_timeout: Optional[float] = None
    retries: Optional[int] = None
    deadline: Optional[float] = None
    headers: Dict[str, str] = dataclasses.field(default_factory=dict)

    def effective_deadline(self) -> Optional[float]:
        return self.deadline if self.deadline is not None else deadlines.current()

    def answer_timeout(self, timeout: float, now: float, deadline: Optional[float]) -> float:
        """Seconds to wait for the answer of a try sent at ``now``: the client's ``timeout`` (or
        this call's ``read_timeout``), plus what is left of a wait, at most until ``deadline``."""
        if self.read_timeout is not None:
            limit = self.read_timeout
        else:
            limit = timeout + max(0.0, (self.wait_until or now) - now)
        if deadline is not None:
            limit = min(limit, deadline - now)
        return max(MIN_TIMEOUT, limit)

    def payload(self) -> Optional[bytes]:
        """This try's body, encoded (a function body is called once per try)."""
        body = self.body() if callable(self.body) else self.body
        return None if body is None else json.dumps(body).encode()


def request_headers(api_key: Optional[str], host: str, has_body: bool, extra: Dict[str, str]) -> Dict[str, str]:
    """The headers of every request. ``Connection: close``: one connection per request (nothing
    stale to reuse after a broker restart, and cheap next to a database transaction)."""
    headers = {"Host": host, "User-Agent": USER_AGENT, "Accept": "application/json", "Connection": "close"}
    headers.update(extra)
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    if has_body:
        headers["Content-Type"] = "application/json"
    return headers


def parse_answer(raw: bytes) -> Dict[str, Any]:
    """A 2xx body as JSON (an empty one as ``{}``)."""
    return json.loads(raw) if raw else {}


def error_from(status: int, raw: bytes, retry_after: Optional[str]) -> LockbrokerError:
    """The exception of an error answer, from its JSON body (or what there is of one) and its
    ``Retry-After`` header, which stands in for a missing ``retry_after_ms``."""
    code, message, retry_after_ms = f"http_{status}", raw[:200].decode("utf-8", "replace"), None
    detail: Optional[Dict[str, Any]] = None
    try:
        error = json.loads(raw)["error"]
        detail = error if isinstance(error, dict) else None
        code = str(error.get("code", code))
        message = str(error.get("message", ""))
        if error.get("retry_after_ms") is not None:
            retry_after_ms = int(error["retry_after_ms"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    if retry_after_ms is None and retry_after is not None:
        retry_after_ms = retry_after_header_ms(retry_after)
    if status == 503 and code == f"http_{status}":
        return Unavailable(status, "unavailable", message, retry_after_ms)
    return error_for(status, code, message, retry_after_ms, detail)


def retry_after_header_ms(value: str) -> Optional[int]:
    """``Retry-After`` (whole seconds, or an HTTP date) in milliseconds from now; None if neither."""
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0, int((when - datetime.now(timezone.utc)).total_seconds() * 1000))


def quote_key(key: str) -> str:
    """``key`` as one path segment: every byte but the unreserved ``A-Za-z0-9-._~`` percent-encoded.

    So ``a/b`` is the key ``a/b``, not a path, and keys compare byte for byte
    as the broker stores them.
    """
    if not isinstance(key, str):
        raise TypeError(f"a key is a str, not {type(key).__name__}")
    return urllib.parse.quote(key, safe="")


def query(params: Dict[str, Any]) -> str:
    """A query string, every byte of a value but the unreserved ones percent-encoded."""
    return urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="")


def ms(seconds: float) -> int:
    """Seconds as the API's whole milliseconds."""
    return int(round(seconds * 1000))


def waiting_body(body: Dict[str, Any], wait: float) -> Tuple[Callable[[], Dict[str, Any]], float]:
    """The body of a waiting acquire for each try, and when its wait ends.

    The first try asks for all of ``wait`` and a retry (after a 503) only for
    what is left of it, as ``wait_ms``; within a caller's deadline, the wait
    ends :data:`deadlines.ANSWER_GRACE` before it, so the broker's "held"
    arrives in time.
    """
    now = time.monotonic()
    ends = now + max(0.0, wait)
    deadline = deadlines.current()
    cut = deadline is not None and deadline - deadlines.ANSWER_GRACE < ends
    if cut:
        ends = max(now, deadline - deadlines.ANSWER_GRACE)  # type: ignore[operator]
    tries = [0]

    def body_now() -> Dict[str, Any]:
        tries[0] += 1
        if tries[0] == 1 and not cut:
            return body
        return dict(body, wait_ms=ms(max(0.0, ends - time.monotonic())))

    return body_now, ends
