"""Graceful shutdown, the transport-agnostic part: refuse new creates, track the turns generating, cut the rest.

The server (transports/server.py) calls `begin()` on SIGTERM, waits for `turns` to empty within the grace period,
then `cut()`s what is left: each remaining turn is cut (`Turn.cut`) and its task cancelled, so the turn ends `failed`
(`server_error`), is stored and recorded, and its consumer still gets the terminal event (`Turn.events`).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from hotloop.errors import ServerShuttingDown
from hotloop.wire.response import ErrorInfo

SHUTDOWN_ERROR = ErrorInfo(
    code="server_error", message="The server shut down before the response finished; retry the request."
)


class Cuttable(Protocol):
    """A generating turn, as the drain sees it."""

    def cut(self, error: ErrorInfo) -> None: ...


class Closable(Protocol):
    """A WebSocket connection, as the drain sees it."""

    async def going_away(self) -> None: ...


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.started = asyncio.Event()  # set with `draining`: WebSocket connections wake to close when idle
        # Each turn generating now → the task consuming its events (cancelled by `cut()`).
        self.turns: dict[Cuttable, asyncio.Task[object] | None] = {}
        self.connections: set[Closable] = set()  # open WebSocket connections, closed 1001 at the end

    def check(self) -> None:
        """Raise `ServerShuttingDown` (503) once draining: a create refused here runs nothing and stores nothing."""
        if self.draining:
            raise ServerShuttingDown()

    def enter(self, turn: Cuttable) -> None:
        self.turns[turn] = asyncio.current_task()

    def leave(self, turn: Cuttable) -> None:
        self.turns.pop(turn, None)

    def begin(self) -> None:
        self.draining = True
        self.started.set()

    def cut(self) -> int:
        """Fail every turn still generating (`server_error`); returns how many were cut."""
        cut = 0
        for turn, task in list(self.turns.items()):
            if task is not None and not task.done():
                turn.cut(SHUTDOWN_ERROR)
                task.cancel()
                cut += 1
        return cut
