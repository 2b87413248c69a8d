"""What the conformance suites (``clients/CONFORMANCE.md``, C01–C21) of the sync and the async
client share: the brokers and tenants the harness hands over, the stand-ins the scenarios allow
(in ``helpers``), and interrupting the main thread.

``tests/python_client.rs`` starts the brokers with ``lockbroker_tests::Conformance`` and sets
the variables read here; missing, the tests fail (``helpers.env``).
"""

import asyncio
import contextlib
import signal
import threading
import time
from typing import Any, Awaitable, Callable, Dict, Iterator, Optional, TypeVar, Union

import lockbroker
from helpers import POLL_EVERY, FakeBroker, env

T = TypeVar("T")

#: The tenant the conformance keys belong to (``LOCKBROKER_API_KEY``'s).
TENANT = "default"

#: A 503 as the broker sends it, without a hint (so the client's own backoff shows).
UNAVAILABLE = (503, {"error": {"code": "unavailable", "message": "database down"}})


def url() -> str:
    return env("LOCKBROKER_URL")


def key() -> str:
    return env("LOCKBROKER_API_KEY")


def tls_url() -> str:
    return env("LOCKBROKER_TLS_URL")


def tls_files(who: str = "CLIENT") -> Dict[str, str]:
    """The CA and a client certificate and key (``CLIENT``: accepted; ``STRANGER``: refused) as
    client options."""
    return {
        "ca_file": env("LOCKBROKER_TEST_CA_FILE"),
        "client_cert": env(f"LOCKBROKER_TEST_{who}_CERT"),
        "client_key": env(f"LOCKBROKER_TEST_{who}_KEY"),
    }


def client(**options: Any) -> lockbroker.Client:
    """A sync client of the plain broker, as tenant ``default``."""
    return lockbroker.Client(url(), key(), **options)


def async_client(**options: Any) -> lockbroker.AsyncClient:
    """An async client of the plain broker, as tenant ``default``."""
    return lockbroker.AsyncClient(url(), key(), **options)


def forwarder(answers: Optional[list] = None) -> FakeBroker:
    """A stand-in in front of the real broker that forwards (after ``answers``, if any) and
    records every request and what it got: for counting requests and their timing."""
    return FakeBroker(list(answers or []) + ["forward"], upstream=url())


async def eventually_async(what: str, timeout: float, check: Callable[[], Union[T, Awaitable[T]]]) -> T:
    """``helpers.eventually`` for coroutines: awaits ``check()`` (or takes its value) until it is
    truthy, and returns it; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true within {timeout} s ({tries} tries)")
        await asyncio.sleep(POLL_EVERY)


class Interrupted(Exception):
    """Raised in the main thread by :func:`interrupt_main`: what a thread interrupt is in Python
    (a signal whose handler raises, as Ctrl-C raises ``KeyboardInterrupt``)."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """For the block, ``SIGUSR1`` to the main thread raises :class:`Interrupted` there."""
    if threading.current_thread() is not threading.main_thread():
        raise AssertionError("signals are handled in the main thread only: run the test there")
    previous = signal.signal(signal.SIGUSR1, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def interrupt_main(when: Callable[[], None]) -> threading.Thread:
    """Starts a thread that runs ``when`` (which waits for the moment) and then interrupts the
    main thread, blocked in a call, with ``SIGUSR1`` (see :func:`interruptible`). An exception
    of ``when`` is kept in the thread's ``error`` attribute, and the main thread not interrupted."""
    main = threading.main_thread().ident

    def run() -> None:
        try:
            when()
        except BaseException as err:  # surfaced by the test, not lost in the thread
            thread.error = err  # type: ignore[attr-defined]
            return
        signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]

    thread = threading.Thread(target=run, daemon=True)
    thread.error = None  # type: ignore[attr-defined]
    thread.start()
    return thread
