"""The broker's two streams, kept open across breaks, as plans (``steps.py``) for both clients:
the event stream (:class:`EventFeed`, ``client.events()``) and an election's leadership
(:class:`LeaderWatch`, ``elections.observe``).

Both are read alike (:class:`Resuming`): when the stream breaks, the broker ends it (a
restart, a lost connection) or nothing arrives for ``idle_timeout`` seconds (not even the
broker's keep-alive, every 15 s), it connects again, from where it was; a stream that keeps
ending at once is given the client's backoff between tries. It is over after its
``timeout`` (None: never) or once closed, and then ends quietly, also while connecting.
What differs is where "from where it was" is: the event stream resumes after the last event
id it gave (``Last-Event-ID``: the broker sends what was missed, as long as its history keeps
it, else a ``"reset"`` event first); ``observe`` starts again from the leadership now, and
gives each change once (a change that came and went meanwhile is missed).
"""

import time
from typing import Generic, Optional, Tuple, TypeVar

from . import specs
from .errors import DeadlineExceeded, Unavailable
from .exchange import Exchange
from .models import Event, Leadership
from .sse import MIN_WAIT, Message, Messages
from .steps import Emit, Plan, Sleep
from .wire import Call

Item = TypeVar("Item")


class Resuming(Generic[Item]):
    """A stream that connects again when it breaks; subclasses say what opens it (:meth:`_call`)
    and what its messages give (:meth:`_accept`).

    Attributes:
        reconnects: how many times it connected again.
    """

    def __init__(self, exchange: Exchange, timeout: Optional[float], idle_timeout: float, what: str) -> None:
        self.reconnects = 0
        self._exchange = exchange
        self._end = None if timeout is None else time.monotonic() + timeout
        self._idle_timeout = idle_timeout
        self._what = what
        self._closed = False
        self._messages: Optional[Messages] = None
        self._breaks = 0

    def _call(self) -> Call:
        """The call that opens the stream from where it is."""
        raise NotImplementedError

    def _accept(self, message: Message) -> Optional[Item]:
        """What ``message`` gives the reader, None for nothing."""
        raise NotImplementedError

    def _ends_on(self, error: Unavailable) -> bool:
        """Whether failing to connect with ``error`` ends the stream quietly (else it is raised)."""
        return self._over()

    def _over(self) -> bool:
        return self._closed or (self._end is not None and time.monotonic() >= self._end)

    def _connecting(self) -> Plan[None]:
        """Opens the stream if it is not open.

        Raises:
            TooManyStreams: the tenant has its most streams open on this broker.
            Unavailable: the broker could not be reached (after the client's retries).
        """
        if self._messages is None:
            response = yield from self._exchange.open(self._call())
            self._messages = Messages(response, self._end, self._idle_timeout, self._what)

    def _next(self) -> Plan[Optional[Item]]:
        """The next item; None once over (the stream is closed then).

        Raises:
            Unavailable: the broker could not be reached again (after the client's retries).
        """
        while not self._over():
            try:
                yield from self._connecting()
            except Unavailable as err:
                if self._ends_on(err):
                    break
                raise
            assert self._messages is not None
            try:
                message = yield from self._messages.next()
            except Unavailable:
                message = None  # broken or idle
            if message is None:
                # Ended, broken or idle: connect again where we were, unless that
                # is what ended it (the timeout, or a close).
                if self._over():
                    break
                self._drop()
                self.reconnects += 1
                self._breaks += 1
                if self._breaks > 1:  # a stream that keeps ending at once is given the client's backoff
                    yield Sleep(self._pause(self._exchange.retry.backoff_delay(self._breaks - 1)))
                continue
            self._breaks = 0
            item = self._accept(message)
            if item is not None:
                return item
        self._close()
        return None

    def _each(self) -> Plan[None]:
        """Emits every item until the stream is over; closes it when done (or abandoned)."""
        try:
            while True:
                item = yield from self._next()
                if item is None:
                    return
                yield Emit(item)
        finally:
            self._close()

    def _pause(self, delay: float) -> float:
        """``delay``, but not past the stream's end."""
        return delay if self._end is None else max(0.0, min(delay, self._end - time.monotonic()))

    def _drop(self) -> None:
        if self._messages is not None:
            messages, self._messages = self._messages, None
            messages.close()

    def _close(self) -> None:
        """Closes the connection; reading ends."""
        self._closed = True
        self._drop()


class EventFeed(Resuming[Event]):
    """Every change of the tenant's locks, semaphores and rwlocks under ``prefix``, as
    :class:`Event` values, from now on or after the event id ``after``.

    Attributes:
        last_id: the id of the last event given (or the ``after`` it
            started from); a new stream started ``after`` it goes on where
            this one stopped.
    """

    def __init__(
        self, exchange: Exchange, prefix: str, after: Optional[int], timeout: Optional[float], idle_timeout: float
    ) -> None:
        super().__init__(exchange, timeout, idle_timeout, "the event stream")
        self.last_id = after
        self._prefix = prefix

    def _call(self) -> Call:
        return specs.events(self._prefix, self.last_id, self._exchange.timeout, self._end)

    def _accept(self, message: Message) -> Event:
        event = Event.from_json(dict(message.data, event=message.event))
        if event.id is not None:
            self.last_id = event.id
        return event


class LeaderWatch(Resuming[Leadership]):
    """The leadership of the election ``name`` now, then once per change of leader (a new term, or a
    vacancy when the leader resigns or expires)."""

    def __init__(self, exchange: Exchange, name: str, timeout: Optional[float], idle_timeout: float) -> None:
        super().__init__(exchange, timeout, idle_timeout, f"observing {name!r}")
        self._name = name
        self._changes = LeaderChanges()
        self._read_timeout = idle_timeout if timeout is None else max(MIN_WAIT, min(idle_timeout, timeout))

    def _call(self) -> Call:
        return specs.ELECTIONS.observe(self._name, self._read_timeout, self._end)

    def _accept(self, message: Message) -> Optional[Leadership]:
        if message.event != "leader":
            return None
        leadership = Leadership.from_json(message.data)
        return leadership if self._changes.is_new(leadership) else None

    def _ends_on(self, error: Unavailable) -> bool:
        # The caller's deadline (`lockbroker.deadline`) ends an observation, as its timeout does.
        return isinstance(error, DeadlineExceeded) or super()._ends_on(error)

    def each(self) -> Plan[None]:
        """Emits each leadership (see the class) until the timeout; closes the stream when done."""
        return self._each()


class LeaderChanges:
    """Which leaderships an ``observe`` gives: each change, once, also across reconnects (a new
    stream starts with the leadership now, which the last stream may have given already)."""

    def __init__(self) -> None:
        self._last: Optional[Tuple[Optional[str], Optional[int]]] = None

    def is_new(self, leadership: Leadership) -> bool:
        now = (leadership.leader, leadership.term)
        if now == self._last:
            return False
        self._last = now
        return True

