"""Keeping a lease alive in the sync client: one daemon thread per held lease, running the shared
renewal loop (``renewing.py``, by the rules of ``clock.py``)."""

import threading
from typing import Callable

from .clock import LeaseClock
from .renewing import Renewals
from .running import Runner
from .steps import Sleep


class Stopped(Exception):
    """Ends the renewal loop at its sleep: :meth:`Renewer.stop` was called."""


class Renewer(Renewals):
    """Renews one lease in a background thread until :meth:`stop`, or sets ``lost`` (a
    ``threading.Event``). Takes the arguments of :class:`~lockbroker.renewing.Renewals`;
    ``what`` also names the thread."""

    def __init__(
        self,
        renew: Callable[[float, float], object],
        clock: LeaseClock,
        lost: threading.Event,
        what: str,
    ) -> None:
        super().__init__(renew, clock, lost, what)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lockbroker-renew {what}", daemon=True)

    def start(self) -> "Renewer":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops renewing and waits for a renewal in flight to end (bounded by its read timeout)."""
        self._stopped = True
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.clock.timeout + 1.0)

    def _run(self) -> None:
        try:
            _StoppableRunner(self._stop).run(self._keep())
        except Stopped:
            pass


class _StoppableRunner(Runner):
    """Sleeps on the stop event, so that a stop ends the sleep (and the loop) at once."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop_event = stop

    def do_sleep(self, step: Sleep) -> None:
        if self._stop_event.wait(step.seconds):
            raise Stopped()
