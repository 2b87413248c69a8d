"""What the client tests share: the broker under test, waiting on conditions,
a TCP proxy that can be cut, and a scripted fake broker for retry tests.

The broker comes from the environment (``tests/python_client.rs`` starts one
and sets it): ``LOCKBROKER_URL``, ``LOCKBROKER_API_KEY`` and
``LOCKBROKER_OTHER_API_KEY`` (a second tenant). Missing, the tests that need
it fail: a suite that skips itself silently proves nothing.
"""

import http.server
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, List, Optional, Tuple, TypeVar

import lockbroker

T = TypeVar("T")

#: How often a condition is tried.
POLL_EVERY = 0.01


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
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # cut
            try:
                up = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                down.close()
                continue
            with self._lock:
                if self._cut:
                    down.close()
                    up.close()
                    return
                self._sockets += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

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
        self._sockets = []


class FakeBroker:
    """An HTTP server answering from a script, to test the client's retries.

    ``answers`` is a list of ``(status, json_body)`` or the string
    ``"hang-up"`` (close the connection without answering); the last one
    repeats (a body of bytes is sent as it is, as an event stream).
    ``requests`` records ``(method, path, monotonic time)``, ``bodies`` the
    JSON bodies (None for none), ``headers`` the request headers.
    """

    def __init__(self, answers: List) -> None:
        self.answers = list(answers)
        self.requests: List[Tuple[str, str, float]] = []
        self.bodies: List[Optional[dict]] = []
        self.headers: List[dict] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                fake.bodies.append(json.loads(self.rfile.read(length)) if length else None)
                fake.requests.append((self.command, self.path, time.monotonic()))
                fake.headers.append(dict(self.headers))
                answer = fake.answers.pop(0) if len(fake.answers) > 1 else fake.answers[0]
                if answer == "hang-up":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, body = answer
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if isinstance(body, bytes) else "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A local port nobody listens on (bound, then closed)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]
