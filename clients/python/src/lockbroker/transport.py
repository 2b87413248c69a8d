"""HTTP to the broker for the sync client: the steps of ``exchange.py``'s plans done with
``http.client``, blocking.

What a call is, when it is tried again and what each failure becomes is the shared plan's
(``exchange.py``). Here: one connection per try (``https`` with the client's TLS context),
each wait a socket timeout, and the failures of sockets and ``http.client`` reported to the
plan as :class:`~lockbroker.steps.Broke`.
"""

import functools
import http.client
import socket
from typing import Any

from .exchange import Exchange
from .options import Options
from .running import Runner
from .steps import Connect, Peek, ReadBody, ReadLine, Send, broken_as
from .wire import Call

#: What a connection that failed raises here (``ssl.SSLError`` and ``socket.timeout`` are ``OSError``s).
_FAILURES = (OSError, http.client.HTTPException)

#: Reports those failures to the plan as ``Broke`` (a timeout flagged as one).
_broken_as = functools.partial(broken_as, _FAILURES, socket.timeout)


class Transport(Runner):
    """Sends calls to one broker with one API key (:class:`~lockbroker.options.Options`)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.exchange = Exchange(options)

    def call(self, call: Call) -> Any:
        """Sends ``call`` (retried as ``exchange.py`` says) and returns its parsed answer.

        Raises:
            LockbrokerError: the broker's error, by its code; ``Unavailable``
                (``Unreachable``, ``OutcomeUnknown``, ``TlsError``,
                ``DeadlineExceeded``) when it could not get an answer.
        """
        return self.run(self.exchange.call(call))

    def open(self, call: Call) -> http.client.HTTPResponse:
        """Sends ``call`` (retried as ``exchange.py`` says) and returns its open 2xx response: the
        caller reads and closes it (streams read it line by line; ``lockbroker_socket`` is its socket)."""
        return self.run(self.exchange.open(call))

    # -- the steps ---------------------------------------------------------------

    def do_connect(self, step: Connect) -> http.client.HTTPConnection:
        o = self.options
        if o.ssl is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                o.host, o.port, timeout=step.timeout, context=o.ssl
            )
        else:
            conn = http.client.HTTPConnection(o.host, o.port, timeout=step.timeout)
        try:
            with _broken_as():
                conn.connect()
        except BaseException:
            conn.close()
            raise
        return conn

    def do_send(self, step: Send) -> http.client.HTTPResponse:
        conn = step.connection
        sock = conn.sock
        with _broken_as():
            sock.settimeout(step.timeout)
            conn.request(step.method, step.target, body=step.body, headers=step.headers)
            response = conn.getresponse()
        # `Connection: close` hands the socket to the response, which closes it; the socket is
        # kept for the timeouts of later reads.
        response.lockbroker_socket = sock  # type: ignore[attr-defined]
        return response

    def do_read_body(self, step: ReadBody) -> bytes:
        with _broken_as():
            _wait_at_most(step.response, step.timeout)
            return step.response.read()

    def do_read_line(self, step: ReadLine) -> bytes:
        response = step.response
        if response.isclosed():  # its whole body was read (Python 3.13 closes the socket then)
            return b""
        with _broken_as():
            _wait_at_most(response, step.timeout)
            return response.readline()

    def do_peek(self, step: Peek) -> bytes:
        sock = step.connection.sock
        with _broken_as():
            sock.settimeout(step.timeout)
            return sock.recv(1)


def _wait_at_most(response: http.client.HTTPResponse, timeout: float) -> None:
    """Sets the timeout of the next read of ``response``, through its socket."""
    sock = getattr(response, "lockbroker_socket", None)
    if sock is not None:
        sock.settimeout(timeout)
