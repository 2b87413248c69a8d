"""HTTP to the broker for the sync client (``http.client``): one call, its answer, its retries.

What is retried, and after how long, is ``retry.py``'s; what a call is and
how its answer reads, ``wire.py``'s. Here: one connection per try (``https``
with the client's TLS context), each wait bounded by the client's timeout
and the caller's deadline, and each failure sorted into

- not sent (the connection could not be opened): retried;
- refused by TLS (``TlsError``): final (a refusal that looks like a broken
  connection, as TLS 1.3's can, is told apart by a probe: ``_tls_refusal``);
- broken after it was sent (reset, timed out, closed): retried if the call
  is idempotent, else ``OutcomeUnknown``;
- an error answer: retried if ``retry.retryable_answer`` says so.

Anything else that interrupts a call (``KeyboardInterrupt``, an exception
raised by a signal handler) closes its connection and passes on.
"""

import http.client
import socket
import ssl
import time
from typing import Any, Optional

from .errors import DeadlineExceeded, TlsError, Unreachable
from .options import Options
from .retry import TLS_PROBE_WAIT, Retryable, broken_after_send, retryable_answer, tls_broke
from .wire import Call, error_from, parse_answer, request_headers


class Transport:
    """Sends calls to one broker with one API key (:class:`~lockbroker.options.Options`)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.url = options.url
        self.timeout = options.timeout
        self.retry = options.retry

    def call(self, call: Call) -> Any:
        """Sends ``call`` (retried as the module says) and returns its parsed answer.

        Raises:
            LockbrokerError: the broker's error, by its code; ``Unavailable``
                (``Unreachable``, ``OutcomeUnknown``, ``TlsError``,
                ``DeadlineExceeded``) when it could not get an answer.
        """
        response = self.open(call)
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise _unanswered(call, f"reading the answer failed: {err}") from err
        finally:
            response.close()
        return call.parse(parse_answer(raw))

    def open(self, call: Call) -> http.client.HTTPResponse:
        """Sends ``call`` (retried as the module says) and returns its open 2xx response: the caller
        reads and closes it (streams read it line by line; ``lockbroker_socket`` is its socket)."""
        deadline = call.effective_deadline()
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(None, "deadline_exceeded", f"{call.method} {call.path}: the deadline had passed")
        attempt = 0
        while True:
            try:
                return self._once(call, deadline)
            except Retryable as retry:
                error = retry.error
            attempt += 1
            time.sleep(self.retry.delay(error, attempt, time.monotonic(), deadline, call.retries))

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        o = self.options
        if o.ssl is not None:
            return http.client.HTTPSConnection(o.host, o.port, timeout=timeout, context=o.ssl)
        return http.client.HTTPConnection(o.host, o.port, timeout=timeout)

    def _once(self, call: Call, deadline: Optional[float]) -> http.client.HTTPResponse:
        now = time.monotonic()
        connect_timeout = self.timeout if deadline is None else max(0.01, min(self.timeout, deadline - now))
        conn = self._connection(connect_timeout)
        try:
            return self._exchange(conn, call, deadline)
        except BaseException:
            conn.close()
            raise

    def _exchange(self, conn: http.client.HTTPConnection, call: Call, deadline: Optional[float]) -> http.client.HTTPResponse:
        try:
            conn.connect()
        except ssl.SSLError as err:
            if not tls_broke(err):
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {err}") from err
            raise Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {err}"))
        except OSError as err:
            raise Retryable(Unreachable(None, "unreachable", f"cannot connect to {self.url}: {err}"))
        data = call.payload()
        headers = request_headers(self.options.api_key, self.options.host_header, data is not None, call.headers)
        sock = conn.sock
        try:
            if sock is not None:
                sock.settimeout(call.answer_timeout(self.timeout, time.monotonic(), deadline))
            conn.request(call.method, self.options.prefix + call.path, body=data, headers=headers)
            response = conn.getresponse()
        except ssl.SSLError as err:
            if not tls_broke(err):  # the broker refused our certificate (TLS 1.3 tells after the handshake)
                raise TlsError(None, "tls", f"TLS with {self.url} failed: {err}") from err
            raise self._broken(call, err) from err
        except (OSError, http.client.HTTPException) as err:
            raise self._broken(call, err) from err
        if response.status < 300:
            # `Connection: close` hands the socket to the response, which closes it.
            response.lockbroker_socket = sock  # type: ignore[attr-defined]
            conn.close()  # a no-op but for the reference
            return response
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        finally:
            conn.close()
        error = error_from(response.status, raw, response.getheader("Retry-After"))
        if retryable_answer(error):
            raise Retryable(error)
        raise error

    def _broken(self, call: Call, err: Exception) -> Exception:
        """What a call whose connection broke after it was sent raises (``retry.broken_after_send``),
        unless the broker refuses this client's TLS handshake (``TlsError``)."""
        # A refusal comes at once: a call that timed out was not refused.
        probe = self.options.ssl is not None and not isinstance(err, socket.timeout)
        refusal = self._tls_refusal() if probe else None
        if refusal is not None:
            return TlsError(None, "tls", f"TLS with {self.url} failed: {refusal}")
        return broken_after_send(call.idempotent, f"{call.method} {call.path} failed: {err}")

    def _tls_refusal(self) -> Optional[str]:
        """Whether the broker refuses this client's TLS handshakes, and how; None if it accepts
        them (or nothing can be told).

        TLS 1.3 tells a client its certificate was refused (or missing) only
        after the handshake, with an alert that a reset may overtake while
        the request is written: a refusal can look like a broken connection.
        A fresh handshake, with nothing sent, tells them apart: a refusal
        comes at once (an alert, or the connection closed), an acceptance is
        silence. Asked only after a connection broke, so it costs nothing
        otherwise.
        """
        o = self.options
        assert o.ssl is not None
        try:
            raw = socket.create_connection((o.host, o.port), timeout=self.timeout)
        except OSError:
            return None
        try:
            with o.ssl.wrap_socket(raw, server_hostname=o.host) as tls:
                tls.settimeout(TLS_PROBE_WAIT)
                closed = tls.recv(1) == b""
            return "the broker closed the connection after the handshake" if closed else None
        except socket.timeout:
            return None  # silence: accepted
        except ssl.SSLError as err:
            return str(err) if not tls_broke(err) else "the broker closed the connection after the handshake"
        except OSError as err:
            return f"the broker dropped the connection after the handshake ({err})"
        finally:
            raw.close()


def _unanswered(call: Call, message: str) -> Exception:
    """A call whose answer broke off while it was read: final (``Unreachable``, or
    ``OutcomeUnknown`` if it is not safe to repeat)."""
    error = broken_after_send(call.idempotent, message)
    return error.error if isinstance(error, Retryable) else error
