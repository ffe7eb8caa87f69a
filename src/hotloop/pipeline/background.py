"""Background mode (protocol.md §1.6): a response that generates in a task outliving its request — start, relay,
wait, stop. The store holds its state for every reader: `queued` when it starts, `in_progress` once generating,
its final state at the end (pipeline/finish.py); the tasks of this process are in `service.background`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from hotloop.pipeline.service import Service
from hotloop.pipeline.turn import Turn
from hotloop.wire.events import Event


class Running:
    """A started background response: its events, for a streaming creator (`relay`)."""

    def __init__(self, listeners: asyncio.Queue[Event | None] | None) -> None:
        self._listeners = listeners

    async def relay(self) -> AsyncGenerator[Event, None]:
        """Every event of the response as it is generated, terminal last (only for a `stream: true` create)."""
        if self._listeners is None:
            return
        while (event := await self._listeners.get()) is not None:
            yield event


async def start(service: Service, turn: Turn, *, stream: bool) -> Running:
    """Store the queued response, then generate it in a task that outlives the request (cancel: `stop`)."""
    owner = turn.session.owner
    turn.response.status = "queued"
    await service.store.save(owner, turn.response, turn.prepared.new_items)
    listeners: asyncio.Queue[Event | None] | None = asyncio.Queue() if stream else None

    async def run() -> None:
        try:
            async with contextlib.aclosing(turn.events()) as events:
                async for event in events:
                    if event.type == "response.in_progress":
                        # GET shows the response generating, not still queued (protocol.md §1.6).
                        await service.store.save(owner, turn.response, turn.prepared.new_items)
                    if listeners is not None:
                        listeners.put_nowait(event)
        finally:
            if listeners is not None:
                for event in turn.ending():
                    listeners.put_nowait(event)
                listeners.put_nowait(None)
            service.background.pop(turn.response.id, None)

    service.background[turn.response.id] = asyncio.create_task(run())
    return Running(listeners)


def running(service: Service, response_id: str) -> asyncio.Task[None] | None:
    return service.background.get(response_id)


async def wait(task: asyncio.Task[None]) -> None:
    """Until the response has ended; a waiter that goes away stops waiting, never the task."""
    await asyncio.wait({task})


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel a background response and wait until it has stored its final state (`cancelled`).

    `asyncio.wait` does not raise the task's cancellation into the caller, so the request itself stays alive.
    """
    task.cancel()
    await asyncio.wait({task})
