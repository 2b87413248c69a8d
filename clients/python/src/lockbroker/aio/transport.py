"""HTTP to the broker for the async client: the sync transport's rules (``transport.py``),
over ``aio/http.py``.

What is retried, and after how long, is ``retry.py``'s, shared with the sync
client; each failure is sorted the same way (not sent: retried; TLS refused:
``TlsError``, told apart from a broken connection by a probe; broken after sending: retried if idempotent, else
``OutcomeUnknown``; an error answer: by ``retry.retryable_answer``).
Cancelling the task that awaits a call closes its connection at once (the
broker then completes or rolls back what it was doing, API.md).
"""

import asyncio
import ssl
import time
from typing import Any, Optional

from ..errors import DeadlineExceeded, TlsError, Unreachable
from ..options import Options
from ..retry import TLS_PROBE_WAIT, Retryable, broken_after_send, retryable_answer, tls_broke
from ..wire import Call, error_from, parse_answer, request_headers
from . import http

#: What a connection that broke raises in asyncio (``TimeoutError`` is an ``OSError`` from 3.11 on).
_BROKEN = (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, http.BadAnswer)


class AsyncTransport:
    """Sends calls to one broker with one API key (:class:`~lockbroker.options.Options`)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.url = options.url
        self.timeout = options.timeout
        self.retry = options.retry

    async def call(self, call: Call) -> Any:
        """Sends ``call`` (retried as the module says) and returns its parsed answer.

        Raises:
            LockbrokerError: as the sync ``Transport.call``.
        """
        response = await self.open(call)
        try:
            timeout = call.answer_timeout(self.timeout, time.monotonic(), call.effective_deadline())
            raw = await asyncio.wait_for(response.read(), timeout)
        except _BROKEN as err:
            error = broken_after_send(call.idempotent, f"reading the answer failed: {err!r}")
            raise (error.error if isinstance(error, Retryable) else error) from err
        finally:
            response.close()
        return call.parse(parse_answer(raw))

    async def open(self, call: Call) -> http.Response:
        """Sends ``call`` (retried as the module says) and returns its 2xx response, head read:
        the caller reads its body and closes it."""
        deadline = call.effective_deadline()
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(None, "deadline_exceeded", f"{call.method} {call.path}: the deadline had passed")
        attempt = 0
        while True:
            try:
                return await self._once(call, deadline)
            except Retryable as retry:
                error = retry.error
            attempt += 1
            await asyncio.sleep(self.retry.delay(error, attempt, time.monotonic(), deadline, call.retries))

    async def _once(self, call: Call, deadline: Optional[float]) -> http.Response:
        o = self.options
        now = time.monotonic()
        connect_timeout = self.timeout if deadline is None else max(0.01, min(self.timeout, deadline - now))
        try:
            reader, writer = await asyncio.wait_for(http.connect(o), connect_timeout)
        except ssl.SSLError as err:
            if not tls_broke(err):
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {err}") from err
            raise Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {err}"))
        except (OSError, asyncio.TimeoutError) as err:
            raise Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {err!r}"))
        try:
            response = await self._exchange(reader, writer, call, deadline)
        except BaseException:
            writer.close()
            raise
        if response.status < 300:
            return response
        try:
            raw = await asyncio.wait_for(response.read(), self.timeout)
        except _BROKEN:
            raw = b""
        finally:
            response.close()
        error = error_from(response.status, raw, response.header("Retry-After"))
        if retryable_answer(error):
            raise Retryable(error)
        raise error

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, call: Call, deadline: Optional[float]
    ) -> http.Response:
        o = self.options
        data = call.payload()
        headers = request_headers(o.api_key, o.host_header, data is not None, call.headers)
        request = http.request(call.method, o.prefix + call.path, headers, data)
        timeout = call.answer_timeout(self.timeout, time.monotonic(), deadline)
        try:
            return await asyncio.wait_for(http.exchange(reader, writer, request), timeout)
        except ssl.SSLError as err:
            if not tls_broke(err):  # the broker refused our certificate (TLS 1.3 tells after the handshake)
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {err}") from err
            raise await self._broken(call, err) from err
        except _BROKEN as err:
            raise await self._broken(call, err) from err

    async def _broken(self, call: Call, err: BaseException) -> Exception:
        """What a call whose connection broke after it was sent raises (``retry.broken_after_send``),
        unless the broker refuses this client's TLS handshake (``TlsError``)."""
        # A refusal comes at once: a call that timed out was not refused.
        probe = self.options.ssl is not None and not isinstance(err, asyncio.TimeoutError)
        refusal = await self._tls_refusal() if probe else None
        if refusal is not None:
            return TlsError(None, "tls", f"TLS with {self.url} failed: {refusal}")
        return broken_after_send(call.idempotent, f"{call.method} {call.path} failed: {err!r}")

    async def _tls_refusal(self) -> Optional[str]:
        """Whether the broker refuses this client's TLS handshakes, and how; None if it accepts
        them (or nothing can be told). The sync ``Transport._tls_refusal`` says why: a fresh
        handshake, nothing sent; a refusal comes at once, an acceptance is silence."""
        try:
            reader, writer = await asyncio.wait_for(http.connect(self.options), self.timeout)
        except ssl.SSLError as err:
            return str(err) if not tls_broke(err) else None
        except (OSError, asyncio.TimeoutError):
            return None
        try:
            closed = await asyncio.wait_for(reader.read(1), TLS_PROBE_WAIT) == b""
            return "the broker closed the connection after the handshake" if closed else None
        except asyncio.TimeoutError:
            return None  # silence: accepted
        except ssl.SSLError as err:
            return str(err) if not tls_broke(err) else "the broker closed the connection after the handshake"
        except OSError as err:
            return f"the broker dropped the connection after the handshake ({err!r})"
        finally:
            writer.close()
