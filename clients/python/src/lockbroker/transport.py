"""HTTP to the broker: one request, its JSON, its errors, and the retries.

Retries follow what the broker promises (README, "Failures and
guarantees"): a ``503`` never hides a grant, so every call may be retried on
it; a connection that could not be opened carried nothing, so every call
may be retried then too. A connection that broke *after* the request was
sent may have been carried out: only calls that are safe to repeat
(``idempotent``: status reads, renewals, releases) are retried then, never
an acquire, whose repetition by the same owner would be a second (re-entrant)
hold. ``4xx`` answers are never retried: asking again gets the same answer.

One connection per request: simple, nothing stale to reuse after a broker
restart, and cheap next to a database transaction.
"""

import http.client
import json
import random
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional, Union

#: A request body, or a function that makes it afresh for each try (a
#: waiting acquire asks each time for only what is left of its wait).
Body = Union[None, Dict[str, Any], Callable[[], Dict[str, Any]]]

from .errors import LockbrokerError, Unavailable, Unreachable, error_for

USER_AGENT = "lockbroker-python/0.1.0"

#: Longest wait honoured from a broker's ``retry_after_ms`` hint between two tries.
MAX_RETRY_AFTER = 10.0


def quote_key(key: str) -> str:
    """``key`` as one path segment: every byte but the unreserved ``A-Za-z0-9-._~`` percent-encoded.

    So ``a/b`` is the key ``a/b``, not a path, and keys compare byte for byte
    as the broker stores them.
    """
    if not isinstance(key, str):
        raise TypeError(f"a key is a str, not {type(key).__name__}")
    return urllib.parse.quote(key, safe="")


def shrinking_wait(body: Dict[str, Any], wait: float) -> Callable[[], Dict[str, Any]]:
    """The body of a waiting acquire for each try: the first asks for all of ``wait``, a retry
    (after a 503) only for what is left of it, as ``wait_ms``."""
    ends = time.monotonic() + max(0.0, wait)
    tries = [0]

    def body_now() -> Dict[str, Any]:
        tries[0] += 1
        if tries[0] == 1:
            return body
        return dict(body, wait_ms=int(round(max(0.0, ends - time.monotonic()) * 1000)))

    return body_now


class Transport:
    """Sends requests to one broker with one API key; retries as described above.

    Args:
        url: the broker's base URL (``http://host:port``, ``https://...``, a path prefix allowed).
        api_key: the tenant's bearer token (None sends no ``Authorization``).
        timeout: seconds for connecting and for each read of an answer.
        retries: how many times a retryable failure is tried again (0: never).
        backoff: the first delay between tries, in seconds; doubled each time.
        max_backoff: the largest delay between tries, before jitter.
    """

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.max_backoff = max_backoff

    def request(self, method: str, path: str, body: Body = None, **options: Any) -> Dict[str, Any]:
        """One call, retried as the module says; its JSON body on 2xx.

        Takes the options of :meth:`open`.

        Raises:
            LockbrokerError: the broker's error, by its code; ``Unavailable``
                or ``Unreachable`` when the retries ran out.
        """
        response = self.open(method, path, body, **options)
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise Unreachable(None, "unreachable", f"reading the answer failed: {err}") from err
        finally:
            response.close()
        return json.loads(raw) if raw else {}

    def open(
        self,
        method: str,
        path: str,
        body: Body = None,
        *,
        idempotent: bool,
        read_timeout: Optional[float] = None,
        retries: Optional[int] = None,
        deadline: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> http.client.HTTPResponse:
        """Sends one call, retried as the module says, and returns its open 2xx response (the caller
        reads and closes it; streams read it line by line).

        Args:
            idempotent: whether repeating the call after a connection broke
                mid-request is harmless.
            read_timeout: seconds to wait for the answer (a waiting acquire
                needs its ``wait`` on top of the usual timeout).
            retries: overrides the client's retry count for this call.
            deadline: a ``time.monotonic()`` instant after which no new try starts.
            headers: more request headers (an event stream's ``Last-Event-ID``).
        """
        budget = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return self._once(method, path, body, idempotent, read_timeout, headers or {})
            except _Retryable as retry:
                error = retry.error
            attempt += 1
            if attempt > budget:
                raise error
            delay = self._delay(attempt, error.retry_after_ms)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise error
            time.sleep(delay)

    def _delay(self, attempt: int, retry_after_ms: Optional[int]) -> float:
        """Exponential backoff with jitter, at least the broker's hint (within reason)."""
        delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        delay *= random.uniform(0.5, 1.0)
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms / 1000.0, MAX_RETRY_AFTER))
        return delay

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _once(
        self,
        method: str,
        path: str,
        body: Body,
        idempotent: bool,
        read_timeout: Optional[float],
        extra_headers: Dict[str, str],
    ) -> http.client.HTTPResponse:
        conn = self._connection(self.timeout)
        try:
            conn.connect()
        except OSError as err:
            conn.close()
            raise _Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {err}"))
        # `Connection: close` hands the socket to the response, which closes it.
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json", "Connection": "close", **extra_headers}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        data = None
        payload = body() if callable(body) else body
        if payload is not None:
            data = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        sock = conn.sock
        try:
            if sock is not None and read_timeout is not None:
                sock.settimeout(read_timeout)
            conn.request(method, self._prefix + path, body=data, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            error = Unreachable(None, "unreachable", f"{method} {path} failed: {err}")
            if idempotent:
                raise _Retryable(error)
            raise error from err
        if response.status < 300:
            # For streams (observe, events), whose reads need their own timeouts.
            response.lockbroker_socket = sock  # type: ignore[attr-defined]
            conn.close()  # a no-op but for the reference: the response owns the socket
            return response
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        finally:
            conn.close()
        error = _error_from(response.status, raw, response.getheader("Retry-After"))
        if response.status == 503:
            raise _Retryable(error)
        raise error


class _Retryable(Exception):
    """Internal: a failure that may be tried again, carrying what to raise if not."""

    def __init__(self, error: LockbrokerError) -> None:
        super().__init__(str(error))
        self.error = error


def _error_from(status: int, raw: bytes, retry_after: Optional[str]) -> LockbrokerError:
    """The exception for an error answer, from its JSON body (or what there is of one)."""
    code, message, retry_after_ms = f"http_{status}", raw[:200].decode("utf-8", "replace"), None
    try:
        error = json.loads(raw)["error"]
        code = str(error.get("code", code))
        message = str(error.get("message", ""))
        if error.get("retry_after_ms") is not None:
            retry_after_ms = int(error["retry_after_ms"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    if retry_after_ms is None and retry_after is not None and retry_after.strip().isdigit():
        retry_after_ms = int(retry_after.strip()) * 1000
    if status == 503 and code == f"http_{status}":
        return Unavailable(status, "unavailable", message, retry_after_ms)
    return error_for(status, code, message, retry_after_ms)
