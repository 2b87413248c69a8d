"""One call to the broker and its retries, as a plan (``steps.py``): the transport of both clients,
without its I/O.

What is retried, and after how long, is ``retry.py``'s; what a call is and how its answer
reads, ``wire.py``'s. Here: one connection per try, each wait bounded by the client's timeout
and the caller's deadline, and each failure sorted into

- not sent (the connection could not be opened): retried;
- refused by TLS (``TlsError``): final (a refusal that looks like a broken connection, as
  TLS 1.3's can, is told apart by a probe: :meth:`Exchange._tls_refusal`);
- broken after it was sent (reset, timed out, closed): retried if the call is idempotent,
  else ``OutcomeUnknown``;
- an error answer: retried if ``retry.retryable_answer`` says so.

Anything else that interrupts a call (``KeyboardInterrupt``, an exception raised by a signal
handler, the task cancelled) closes its connection and passes on. The front ends do the steps:
``transport.py`` with ``http.client``, ``aio/transport.py`` over ``aio/http.py``.
"""

import time
from typing import Any, Optional

from .errors import DeadlineExceeded, TlsError, Unreachable
from .options import Options
from .retry import TLS_PROBE_WAIT, Retryable, broken_after_send, retryable_answer, tls_broke, tls_refused
from .steps import Broke, Connect, Peek, Plan, ReadBody, Send, Sleep
from .wire import Call, error_from, parse_answer, request_headers

#: The shortest connect timeout of a try (a deadline about to pass leaves little).
MIN_CONNECT_WAIT = 0.01

#: What a TLS probe says when the broker closed the connection on a fresh handshake.
CLOSED = "the broker closed the connection after the handshake"


class Exchange:
    """The calls to one broker with one API key (:class:`~lockbroker.options.Options`), as plans."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.url = options.url
        self.timeout = options.timeout
        self.retry = options.retry

    def call(self, call: Call) -> Plan[Any]:
        """Sends ``call`` (retried as the module says) and gives its parsed answer.

        Raises:
            LockbrokerError: the broker's error, by its code; ``Unavailable``
                (``Unreachable``, ``OutcomeUnknown``, ``TlsError``,
                ``DeadlineExceeded``) when it could not get an answer.
        """
        response = yield from self.open(call)
        try:
            timeout = call.answer_timeout(self.timeout, time.monotonic(), call.effective_deadline())
            raw = yield ReadBody(response, timeout)
        except Broke as broke:
            # The answer broke off while it was read: final (`Unreachable`, or
            # `OutcomeUnknown` if the call is not safe to repeat).
            error = broken_after_send(call.idempotent, f"reading the answer failed: {broke.detail}")
            raise (error.error if isinstance(error, Retryable) else error) from broke.error
        finally:
            response.close()
        return call.parse(parse_answer(raw))

    def open(self, call: Call) -> Plan[Any]:
        """Sends ``call`` (retried as the module says) and gives its 2xx response, its head read:
        the caller reads its body (whole, or line by line for a stream) and closes it."""
        deadline = call.effective_deadline()
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(None, "deadline_exceeded", f"{call.method} {call.path}: the deadline had passed")
        attempt = 0
        while True:
            try:
                return (yield from self._once(call, deadline))
            except Retryable as retry:
                error = retry.error
            attempt += 1
            yield Sleep(self.retry.delay(error, attempt, time.monotonic(), deadline, call.retries))

    def _once(self, call: Call, deadline: Optional[float]) -> Plan[Any]:
        """One try: the response if 2xx, else raises (:class:`Retryable` if it may be tried again)."""
        now = time.monotonic()
        connect_timeout = self.timeout if deadline is None else max(MIN_CONNECT_WAIT, min(self.timeout, deadline - now))
        try:
            connection = yield Connect(connect_timeout)
        except Broke as broke:
            if tls_refused(broke.error):
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {broke.error}") from broke.error
            raise Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {broke.detail}"))
        try:
            response = yield from self._send(connection, call, deadline)
        except BaseException:
            connection.close()
            raise
        if response.status < 300:
            return response
        try:
            raw = yield ReadBody(response, self.timeout)
        except Broke:
            raw = b""
        finally:
            response.close()
        error = error_from(response.status, raw, response.getheader("Retry-After"))
        if retryable_answer(error):
            raise Retryable(error)
        raise error

    def _send(self, connection: Any, call: Call, deadline: Optional[float]) -> Plan[Any]:
        o = self.options
        data = call.payload()  # afresh for each try: a waiting acquire asks for what is left of its wait
        headers = request_headers(o.api_key, o.host_header, data is not None, call.headers)
        timeout = call.answer_timeout(self.timeout, time.monotonic(), deadline)
        try:
            return (yield Send(connection, call.method, o.prefix + call.path, headers, data, timeout))
        except Broke as broke:
            if tls_refused(broke.error):  # the broker refused our certificate (TLS 1.3 tells after the handshake)
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {broke.error}") from broke.error
            raise (yield from self._broken(call, broke)) from broke.error

    def _broken(self, call: Call, broke: Broke) -> Plan[Exception]:
        """What a call whose connection broke after it was sent raises (``retry.broken_after_send``),
        unless the broker refuses this client's TLS handshake (``TlsError``)."""
        # A refusal comes at once: a call that timed out was not refused.
        refusal = None
        if self.options.ssl is not None and not broke.timed_out:
            refusal = yield from self._tls_refusal()
        if refusal is not None:
            return TlsError(None, "tls", f"TLS with {self.url} failed: {refusal}")
        return broken_after_send(call.idempotent, f"{call.method} {call.path} failed: {broke.detail}")

    def _tls_refusal(self) -> Plan[Optional[str]]:
        """Whether the broker refuses this client's TLS handshakes, and how; None if it accepts
        them (or nothing can be told).

        TLS 1.3 tells a client its certificate was refused (or missing) only
        after the handshake, with an alert that a reset may overtake while
        the request is written: a refusal can look like a broken connection.
        A fresh handshake, with nothing sent, tells them apart: a refusal
        comes at once (an alert, or the connection closed), an acceptance is
        silence. Asked only after a connection broke, so it costs nothing
        otherwise. A handshake that does not complete tells nothing, unless
        it is refused outright.
        """
        try:
            connection = yield Connect(self.timeout)
        except Broke as broke:
            return str(broke.error) if tls_refused(broke.error) else None
        try:
            closed = (yield Peek(connection, TLS_PROBE_WAIT)) == b""
            return CLOSED if closed else None
        except Broke as broke:
            if broke.timed_out:
                return None  # silence: accepted
            if tls_refused(broke.error):
                return str(broke.error)
            if tls_broke(broke.error):
                return CLOSED
            return f"the broker dropped the connection after the handshake ({broke.detail})"
        finally:
            connection.close()
