"""What the client tests share: the broker under test, waiting on conditions,
a TCP proxy that can be cut, frozen or made to keep the broker's answers, and
a scripted fake broker (which may forward to the real one) for retry tests.

The broker comes from the environment (``tests/python_client.rs`` starts one
and sets it): ``LOCKBROKER_URL``, ``LOCKBROKER_API_KEY`` and
``LOCKBROKER_OTHER_API_KEY`` (a second tenant). Missing, the tests that need
it fail: a suite that skips itself silently proves nothing.
"""

import asyncio
import http.client
import http.server
import json
import os
import socket
import threading
import time
import unittest
import urllib.parse
import uuid
from typing import Callable, List, Optional, Set, Tuple, TypeVar

import lockbroker

T = TypeVar("T")

#: How often a condition is tried.
POLL_EVERY = 0.01


class AsyncCase(unittest.IsolatedAsyncioTestCase):
    """Runs each test in its own event loop in asyncio's debug mode (as ``IsolatedAsyncioTestCase``
    does), without its warnings about slow callbacks: the machine may be busy, and a test may
    block the loop on purpose (C21)."""

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 30.0


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise AssertionError(
            f"{name} is not set: these tests run against a broker (cargo test -p lockbroker-tests --test python_client)"
        )
    return value


def client(**kw) -> lockbroker.Client:
    """A client of the broker under test, as the `default` tenant."""
    return lockbroker.Client(env("LOCKBROKER_URL"), env("LOCKBROKER_API_KEY"), **kw)


def other_tenant() -> lockbroker.Client:
    """A client of the broker under test, as a second tenant."""
    return lockbroker.Client(env("LOCKBROKER_URL"), env("LOCKBROKER_OTHER_API_KEY"))


def unique(prefix: str) -> str:
    """A key no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def eventually(what: str, timeout: float, check: Callable[[], Optional[T]]) -> T:
    """Polls ``check`` until it returns something truthy, and returns that.

    Raises AssertionError naming ``what`` when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true within {timeout} s ({tries} tries)")
        time.sleep(POLL_EVERY)


class Proxy:
    """A TCP proxy to the broker, to cut a client off it while others still reach it.

    ``cut()`` closes the listening socket and every connection: new
    connections are refused, ones in flight break. ``drop()`` breaks only
    the connections in flight.
    """

    def __init__(self, upstream_url: str) -> None:
        host_port = upstream_url.split("://", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self._listener.getsockname()[1]
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        self._frozen = False
        self._downs: List[socket.socket] = []  # the client's side of each connection
        self._held: Set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # cut
            if self._frozen:  # held open, in silence
                with self._lock:
                    self._sockets.append(down)
                continue
            try:
                up = socket.create_connection(self._upstream, timeout=5)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._cut:
                    down.close()
                    up.close()
                    return
                self._sockets += [down, up]
                self._downs.append(down)
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self._frozen or dst in self._held:
                    continue  # swallowed: the other side hears nothing
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # A held or frozen side hears nothing, not even the other side's end.
            silent = self._frozen or dst in self._held
            for s in (src,) if silent else (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def freeze(self) -> None:
        """Stops forwarding, silently: connections in flight stay open and hear nothing more, new
        ones are accepted and never answered (a network that drops everything)."""
        self._frozen = True

    def hold_answers(self) -> None:
        """The connections open now still carry requests to the broker, but its answers stay
        here (the broker believes them delivered); new connections go through as before."""
        with self._lock:
            self._held.update(self._downs)

    def cut(self) -> None:
        """Refuses new connections and breaks the ones in flight."""
        with self._lock:
            self._cut = True
            self._listener.close()
            self._break()

    def drop(self) -> None:
        """Breaks the connections in flight; new ones still get through."""
        with self._lock:
            self._break()

    def _break(self) -> None:
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._sockets, self._downs = [], []


class FakeBroker:
    """An HTTP server answering from a script, to test the client's retries.

    ``answers`` is a list of ``(status, json_body)`` (or ``(status,
    json_body, headers)``), the string
    ``"hang-up"`` (close the connection without answering), the string
    ``"forward"`` (pass the request on to ``upstream``, a real broker, and
    its answer back) or ``"forward-then-hang-up"`` (pass it on, then close
    the connection without answering); the last one repeats (a body of bytes is sent as it
    is, as an event stream). ``requests`` records ``(method, path,
    monotonic time)``, ``bodies`` the JSON bodies (None for none),
    ``headers`` the request headers, ``answered`` what each got:
    ``(status, error code or None, retry_after_ms or None)``, or None for a
    hang-up.
    """

    def __init__(self, answers: List, upstream: Optional[str] = None) -> None:
        self.answers = list(answers)
        self.requests: List[Tuple[str, str, float]] = []
        self.bodies: List[Optional[dict]] = []
        self.headers: List[dict] = []
        self.answered: List[Optional[Tuple[int, Optional[str], Optional[int]]]] = []
        self._upstream = upstream
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw_body = self.rfile.read(length) if length else b""
                fake.bodies.append(json.loads(raw_body) if raw_body else None)
                fake.requests.append((self.command, self.path, time.monotonic()))
                fake.headers.append(dict(self.headers))
                answer = fake.answers.pop(0) if len(fake.answers) > 1 else fake.answers[0]
                if answer == "forward-then-hang-up":  # carried out, its answer lost
                    fake._forward(self.command, self.path, dict(self.headers), raw_body)
                    answer = "hang-up"
                if answer == "hang-up":
                    fake.answered.append(None)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                extra = {}
                if answer == "forward":
                    status, raw, extra = fake._forward(self.command, self.path, dict(self.headers), raw_body)
                    content_type = "application/json"
                else:
                    status, body = answer[:2]
                    extra = answer[2] if len(answer) > 2 else {}
                    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                    content_type = "text/event-stream" if isinstance(body, bytes) else "application/json"
                fake.answered.append((status, *_error_of(raw)))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _forward(self, method: str, path: str, headers: dict, body: bytes) -> Tuple[int, bytes, dict]:
        """Passes one request on to the upstream broker: its status, body and ``Retry-After``."""
        parts = urllib.parse.urlsplit(self._upstream or "")
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type", "accept")}
            conn.request(method, path, body=body or None, headers=sent)
            answer = conn.getresponse()
            raw = answer.read()
            retry_after = answer.getheader("Retry-After")
            return answer.status, raw, ({"Retry-After": retry_after} if retry_after else {})
        finally:
            conn.close()

    def count(self, method: str, path_part: str) -> int:
        """How many requests of ``method`` whose path contains ``path_part`` arrived."""
        return sum(1 for m, p, _ in self.requests if m == method and path_part in p)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error_of(raw: bytes) -> Tuple[Optional[str], Optional[int]]:
    """The error code and ``retry_after_ms`` of an answer's body, if it is an error."""
    try:
        error = json.loads(raw)["error"]
        return error.get("code"), error.get("retry_after_ms")
    except (ValueError, KeyError, TypeError):
        return None, None


def closed_port() -> int:
    """A local port nobody listens on (bound, then closed)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]
