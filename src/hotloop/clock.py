"""Waits that end at their moment, not at the event loop's next millisecond: what the benchmarks' stand-ins for
the engine and the tools wait with.

The event loop runs timers at millisecond precision (uvloop, and asyncio's epoll loop alike). hotloop-sim's wait for
its first token, 20 ms less its own bookkeeping, woke a median 0.80 ms after it was due (0.66-0.95 between the
quartiles; `hotloop bench agent-loop`, 1 000 tok/s, 150 turns), and its last token was sent up to 0.5 ms early
(waits that short were skipped); the bench client's 10 ms tool woke 0.05-0.5 ms late, depending on where in a
millisecond it began. Each is the stand-in's error, not the API's, yet the bench charged it to hotloop: time to
first token, the turn's end and the tool's time are what the physical limit counts exactly. `until` sleeps on the
loop until shortly before the moment, then hands the rest to one thread of its own, which waits on the kernel's
high-resolution timers (a condition's timed wait) and wakes the task with `call_soon_threadsafe`: ~0.1 ms late,
never early.

A wake costs ~20-40 µs of CPU, so hotloop-sim takes it twice a response (backends/sim/backend.py: its first and
last token); the tokens between keep the loop's coarse timers, which decide nothing a client measures.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
import time

COARSE_S = 0.002  # the loop's timer may wake up to ~1 ms late: its sleep ends this long before the moment
PRECISION_S = 0.00005  # a wait this short is not worth the thread's wake-up, which is about as late

Entry = tuple[float, int, asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Waker:
    """Wakes tasks at `time.perf_counter()` moments from a daemon thread (started by the first wait)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a forked child has none of the parent's threads

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[Entry] = []
        self._order = itertools.count()  # ties in time leave in the order they were asked for
        self._thread: threading.Thread | None = None

    async def until(self, moment: float) -> None:
        """Return at `moment` (perf_counter seconds), never before it."""
        coarse = moment - time.perf_counter() - COARSE_S
        if coarse > 0:
            await asyncio.sleep(coarse)
        if moment - time.perf_counter() <= PRECISION_S:
            while time.perf_counter() < moment:  # at most PRECISION_S: not worth a thread's wake-up
                pass
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._cond:
            heapq.heappush(self._heap, (moment, next(self._order), loop, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hotloop-clock", daemon=True)
                self._thread.start()
            self._cond.notify()
        await future

    def _run(self) -> None:
        cond, heap = self._cond, self._heap
        with cond:
            while True:
                if not heap:
                    cond.wait()
                    continue
                wait = heap[0][0] - time.perf_counter()
                if wait > 0:
                    cond.wait(wait)  # or until an earlier moment is asked for
                    continue
                _, _, loop, future = heapq.heappop(heap)
                try:
                    loop.call_soon_threadsafe(_wake, future)
                except RuntimeError:  # its loop has closed: nobody waits any more
                    pass


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled wait (the client left) stays cancelled
        future.set_result(None)


WAKER = Waker()
