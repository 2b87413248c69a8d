"""What a shared procedure asks of the client that runs it: the steps of a *plan*, and how a
front end walks one.

Why plans: the sync and the async client do the same things in the same order (send a call
and try it again after a 503, renew a lease a third of the way through its TTL, read an event
stream and resume it, give back an acquire whose answer was lost); they differ only in how
they wait, blocked in a socket call or a thread's sleep, or suspended in an ``await``. So
each procedure is written once, without I/O, as a generator: where it needs I/O or time to
pass it yields a step (:class:`Connect`, :class:`Send`, :class:`Sleep`, ...), and carries on
with the step's outcome, or with the step's failure raised at that ``yield``. A front end
walks the plan (:class:`Walk`): the sync one does each step by blocking (``running.py``,
``transport.py``), the async one by awaiting (``aio/running.py``, ``aio/transport.py``).
psycopg 3 is built the same way around libpq (its ``generators`` and ``waiting`` modules).

Plans compose with ``yield from``, and a plan's ``return`` is its result. A plan that hands
values to a consumer as it goes (a listing, ``observe``) yields :class:`Emit` for each. The
connections and responses that steps return are the front end's own objects: a plan only
hands them back in later steps, or calls their ``close()`` (which never waits).

Each step names the front end's method that does it (``verb``: ``do_connect``, ...).
"""

import contextlib
import dataclasses
from typing import Any, Callable, ClassVar, Dict, Generator, Iterator, Optional, Tuple, Type, TypeVar, Union

T = TypeVar("T")

#: A procedure as a generator of steps, returning its result.
Plan = Generator[Any, Any, T]


@dataclasses.dataclass(frozen=True)
class Connect:
    """Open a connection to the broker (the TLS handshake done, for ``https``) within ``timeout``
    seconds. Gives the front end's connection (it has ``close()``)."""

    timeout: float
    verb: ClassVar[str] = "do_connect"


@dataclasses.dataclass(frozen=True)
class Send:
    """Write one request on ``connection`` and read the answer's status line and headers, within
    ``timeout`` seconds. Gives the response (``status``, ``getheader(name)``, ``close()``), its
    body left to read."""

    connection: Any
    method: str
    target: str
    headers: Dict[str, str]
    body: Optional[bytes]
    timeout: float
    verb: ClassVar[str] = "do_send"


@dataclasses.dataclass(frozen=True)
class ReadBody:
    """Read the rest of ``response``'s body, within ``timeout`` seconds. Gives the bytes."""

    response: Any
    timeout: float
    verb: ClassVar[str] = "do_read_body"


@dataclasses.dataclass(frozen=True)
class ReadLine:
    """Read the next line of ``response``'s body, waiting at most ``timeout`` seconds for it. Gives
    the line with its end, ``b""`` at the end of the body."""

    response: Any
    timeout: float
    verb: ClassVar[str] = "do_read_line"


@dataclasses.dataclass(frozen=True)
class Peek:
    """Wait up to ``timeout`` seconds for one byte on ``connection``, nothing having been sent.
    Gives it, or ``b""`` when the broker closed the connection."""

    connection: Any
    timeout: float
    verb: ClassVar[str] = "do_peek"


@dataclasses.dataclass(frozen=True)
class Sleep:
    """Let ``seconds`` pass. (A lease's renewer may be stopped meanwhile: then the step fails and
    the plan ends there.)"""

    seconds: float
    verb: ClassVar[str] = "do_sleep"


@dataclasses.dataclass(frozen=True)
class Invoke:
    """Call a function the front end was given (a lease's renew or release): called in the sync
    client, awaited in the async one. Gives what it returns."""

    function: Callable[..., Any]
    args: Tuple[Any, ...] = ()
    verb: ClassVar[str] = "do_invoke"


@dataclasses.dataclass(frozen=True)
class Shield:
    """Walk ``plan`` to its end even if whoever waits for it is cancelled meanwhile (the async
    client's clean-up after an interrupted acquire); in the sync client, just walk it. Gives
    its result."""

    plan: "Plan[Any]"
    verb: ClassVar[str] = "do_shield"


@dataclasses.dataclass(frozen=True)
class Emit:
    """Hand ``value`` to the consumer of an iterating plan (see :meth:`Walk.emitted`); the plan
    goes on when the next value is asked for."""

    value: Any
    verb: ClassVar[str] = "do_emit"


Step = Union[Connect, Send, ReadBody, ReadLine, Peek, Sleep, Invoke, Shield, Emit]


class Broke(Exception):
    """A step's I/O failed: the connection could not be opened, broke, or ``timed_out``.

    ``error`` is what the front end's I/O raised, an ``ssl.SSLError`` included (which a plan
    tells apart: a refused handshake is final, a broken one is not). Front ends raise it from
    their failures with :func:`broken_as`; plans turn it into the client's exceptions.
    """

    def __init__(self, error: BaseException, timed_out: bool) -> None:
        super().__init__(str(error) or type(error).__name__)
        self.error = error
        self.timed_out = timed_out

    @property
    def detail(self) -> str:
        """What broke, for messages (an error's text, or its class when it has none)."""
        return str(self)


@contextlib.contextmanager
def broken_as(failures: Tuple[Type[BaseException], ...], timeout: Type[BaseException]) -> Iterator[None]:
    """Raises a front end's I/O ``failures`` in the block as :class:`Broke` (``timed_out`` when the
    failure is a ``timeout``); anything else passes as it is."""
    try:
        yield
    except failures as err:
        raise Broke(err, isinstance(err, timeout)) from err


class _End:
    def __repr__(self) -> str:
        return "END"


#: What :meth:`Walk.emitted` gives once the plan has ended.
END: Any = _End()


class Walk:
    """A plan on its way: the ``step`` it waits on, or once ``done`` its ``result``.

    A front end does ``step`` and hands the outcome to :meth:`resume`, until the plan is done::

        walk = Walk(plan)
        while not walk.done:
            walk.resume(*outcome(walk.step))   # (value, None), or (None, the failure)
        return walk.result
    """

    def __init__(self, plan: "Plan[Any]") -> None:
        self._plan = plan
        self.step: Any = None
        self.done = False
        self.result: Any = None
        self._handed = False
        self.resume(None, None)

    def resume(self, value: Any, error: Optional[BaseException]) -> None:
        """Gives the plan the outcome of its step: ``value``, or ``error`` raised at its ``yield``;
        then it runs to its next step, or to its end. What the plan raises passes on from here."""
        try:
            self.step = self._plan.send(value) if error is None else self._plan.throw(error)
        except StopIteration as end:
            self.step, self.done, self.result = None, True, end.value

    def emitted(self) -> "Plan[Any]":
        """A plan that walks this one to the next value it emits, and gives it (:data:`END` once the
        plan has ended): what an iterator over the plan waits for, item by item. The plan goes on
        from an :class:`Emit` only when the next item is asked for."""
        if self._handed:
            self._handed = False
            self.resume(None, None)
        while not self.done:
            if isinstance(self.step, Emit):
                self._handed = True
                return self.step.value
            try:
                value = yield self.step
            except BaseException as error:  # the step failed: the plan's to handle
                self.resume(None, error)
            else:
                self.resume(value, None)
        return END

    def close(self) -> None:
        """Ends the plan where it is (its ``finally`` blocks run): its consumer stopped."""
        self._plan.close()
