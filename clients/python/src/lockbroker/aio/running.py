"""Walking plans (``steps.py``) in the async client: each step awaited in the task that asked.

:class:`AsyncRunner` does the steps that need no broker (sleeping, awaiting a function,
running a plan to its end shielded from cancellation);
:class:`~lockbroker.aio.transport.AsyncTransport` adds the HTTP ones. A task cancelled while
it awaits a step gets its ``CancelledError`` raised in the plan, at that step: the plan cleans
up (a guard gives back what it got, shielded) and lets it pass.
"""

import asyncio
from typing import Any, AsyncIterator, Optional, Tuple

from ..steps import END, Invoke, Plan, Shield, Sleep, T, Walk


class AsyncRunner:
    """Walks plans in the calling task: a coroutine method ``do_<verb>`` per step it can take."""

    async def run(self, plan: Plan[T]) -> T:
        """Walks ``plan`` to its end and returns its result (or raises what it raises)."""
        walk = Walk(plan)
        while not walk.done:
            walk.resume(*await self._outcome(walk.step))
        return walk.result

    async def iterate(self, plan: Plan[Any]) -> AsyncIterator[Any]:
        """Walks ``plan`` as an async iterator: yields each value it emits, when it is asked for;
        closing the iterator ends the plan where it is."""
        walk = Walk(plan)
        try:
            while True:
                item = await self.run(walk.emitted())
                if item is END:
                    return
                yield item
        finally:
            walk.close()

    async def _outcome(self, step: Any) -> Tuple[Any, Optional[BaseException]]:
        try:
            return await getattr(self, step.verb)(step), None
        except BaseException as error:  # CancelledError too: the plan decides, then lets it pass
            return None, error

    async def do_sleep(self, step: Sleep) -> None:
        await asyncio.sleep(step.seconds)

    async def do_invoke(self, step: Invoke) -> Any:
        return await step.function(*step.args)

    async def do_shield(self, step: Shield) -> Any:
        # A second cancellation of the task does not stop it: it finishes in the background.
        return await asyncio.shield(self.run(step.plan))


#: The runner of what needs no broker (a held lease's release, given as a coroutine function).
RUNNER = AsyncRunner()
