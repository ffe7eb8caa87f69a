"""A bound on each of a series of waits: the backend timeout (`backend_timeout_s`: a wait on the model that lasts
too long fails the response, pipeline/generate.py), and an upstream engine's read timeout (`read_timeout_s`: the
longest wait for its stream's next chunk, backends/upstream/client.py).

One timer per series, re-armed lazily: each wait only notes when it began, and the timer, when it fires, either
finds the current wait overdue (and cancels it) or sleeps until that wait's own deadline. Measured per delta on
the 2-core dev machine (uvloop): about 2 µs, where an `asyncio.timeout` around each wait costs 10-15 µs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class BackendStalled(Exception):
    """The backend produced nothing within `backend_timeout_s` (protocol.md §2.9: a `server_error`)."""


def backend_stalled(limit: float) -> BackendStalled:
    return BackendStalled(f"The model stalled: no output within {limit:g} s (backend_timeout_s).")


class StallTimer:
    """Bounds each `wait` to `limit` seconds (0: no bound); only the awaited step's time counts. A wait past it
    raises `expired(limit)`."""

    def __init__(self, limit: float, expired: Callable[[float], BaseException] = backend_stalled) -> None:
        self.limit = limit
        self._error = expired
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._since: float | None = None  # when the current wait began; None between waits
        self._cancelling = 0
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None

    async def wait(self, step: Awaitable[T]) -> T:
        if self.limit <= 0:
            return await step
        task = self._task
        if task is None:  # the turn's task, the same for all its waits: looked up once
            task = self._task = asyncio.current_task()
        self._cancelling = task.cancelling() if task is not None else 0
        self._since = self._loop.time()
        if self._handle is None:
            self._handle = self._loop.call_at(self._since + self.limit, self._check)
        try:
            return await step
        except asyncio.CancelledError:
            if self._expired and task is not None:
                self._expired = False
                if task.uncancel() <= self._cancelling:  # our cancellation alone, not the client's too
                    raise self._error(self.limit) from None
            raise
        finally:
            self._since = None

    def close(self) -> None:
        """Drop the pending timer (it holds the task until it fires)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._task = None

    def _check(self) -> None:
        self._handle = None
        if self._since is None or self._task is None:
            return  # between waits: the next wait arms the timer again
        due = self._since + self.limit
        if self._loop.time() >= due:
            self._expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(due, self._check)
