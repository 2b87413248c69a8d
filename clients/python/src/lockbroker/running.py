"""Walking plans (``steps.py``) in the sync client: each step done by blocking the thread that
asked, each wait slept.

:class:`Runner` does the steps that need no broker (sleeping, calling a function, running a
plan to its end); :class:`~lockbroker.transport.Transport` adds the HTTP ones, and a lease's
renewal thread sleeps on its stop event instead (``renewal.py``).
"""

import time
from typing import Any, Iterator, Optional, Tuple

from .steps import END, Invoke, Plan, Shield, Sleep, T, Walk


class Runner:
    """Walks plans in the calling thread: a method ``do_<verb>`` per step it can take."""

    def run(self, plan: Plan[T]) -> T:
        """Walks ``plan`` to its end and returns its result (or raises what it raises)."""
        walk = Walk(plan)
        while not walk.done:
            walk.resume(*self._outcome(walk.step))
        return walk.result

    def iterate(self, plan: Plan[Any]) -> Iterator[Any]:
        """Walks ``plan`` as an iterator: yields each value it emits, when it is asked for; closing
        the iterator (leaving a ``for`` loop) ends the plan where it is."""
        walk = Walk(plan)
        try:
            while True:
                item = self.run(walk.emitted())
                if item is END:
                    return
                yield item
        finally:
            walk.close()

    def _outcome(self, step: Any) -> Tuple[Any, Optional[BaseException]]:
        try:
            return getattr(self, step.verb)(step), None
        except BaseException as error:  # KeyboardInterrupt too: the plan decides (a guard gives back what it got)
            return None, error

    def do_sleep(self, step: Sleep) -> None:
        time.sleep(step.seconds)

    def do_invoke(self, step: Invoke) -> Any:
        return step.function(*step.args)

    def do_shield(self, step: Shield) -> Any:
        # Only a signal interrupts a thread, and that is the caller's: the plan runs here.
        return self.run(step.plan)


#: The runner of what needs no broker (a held lease's release, given as a function).
RUNNER = Runner()
