"""Waits that end at their moment, not at the event loop's next millisecond: what the benchmarks' stand-ins for
the engine and the tools wait with.

The event loop runs timers at millisecond precision (uvloop, and asyncio's epoll loop alike). hotloop-sim's wait for
its first token, 20 ms less its own bookkeeping, woke a median 0.80 ms after it was due (0.66-0.95 between the
quartiles; `hotloop bench agent-loop`, 1 000 tok/s, 152 turns), and its last token was sent up to 0.5 ms early
(waits that short were skipped); the bench client's 10 ms tool woke 0.05-0.5 ms late, depending on where in a
millisecond it began. Each is the stand-in's error, not the API's, yet the bench charged it to hotloop: time to
first token, the turn's end and the tool's time are what the physical limit counts exactly.

On Linux each loop gets a timerfd (the kernel's high-resolution timers, armed at the earliest moment asked for, on
the clock `time.perf_counter` reads) among the descriptors it polls: the loop wakes when the timer fires and wakes
the waiting tasks on its own thread, 0.1-0.4 ms late on this VM (an idle CPU's wake-up, which a server waiting on
an engine's socket pays too), never early. A thread of timers would wait for the GIL behind a busy loop
(up to the 5 ms switch interval: tried, `bench load`'s overhead p50 rose from 15 to 23 ms). Elsewhere, or where
the timerfd cannot be made, `until` sleeps on the loop's own timers, as before.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import sys
import time
import weakref

CLOCK_MONOTONIC = 1  # time.perf_counter's clock on Linux
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.POINTER(_Itimerspec),
        ]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
Entry = tuple[float, int, "asyncio.Future[None]"]


class _LoopTimer:
    """One loop's timerfd and the waits on it, earliest first; the descriptor lives while a wait does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        loop.add_reader(fd, self._fire)
        self.loop = weakref.ref(loop)  # the loop holds this timer (its reader), not the other way round
        self.fd = fd
        self.heap: list[Entry] = []  # the descriptor is armed for the first entry's moment
        # A loop that closes with a wait pending never fires it: the descriptor then goes with the loop.
        self._release = weakref.finalize(loop, os.close, fd)

    def add(self, moment: float, future: asyncio.Future[None], order: int) -> None:
        heapq.heappush(self.heap, (moment, order, future))
        if self.heap[0][2] is future:  # the earliest now
            self._arm(moment)

    def _arm(self, moment: float) -> None:
        assert _LIBC is not None
        seconds = int(moment)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(seconds, int((moment - seconds) * 1e9)))
        if _LIBC.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def _fire(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # re-armed since it fired
            pass
        heap, now = self.heap, time.perf_counter()
        while heap and heap[0][0] <= now:
            future = heapq.heappop(heap)[2]
            if not future.done():  # a cancelled wait (the client left) stays cancelled
                future.set_result(None)
        if heap:
            self._arm(heap[0][0])
        else:
            self.close()

    def close(self) -> None:
        loop = self.loop()
        if loop is not None:
            _TIMERS.pop(id(loop), None)
            loop.remove_reader(self.fd)
        self._release()  # closes the descriptor, once


# Each loop's timer, held by its loop alone (the reader): a pending wait's future holds the loop, so a timer kept
# here would keep a closed loop, and its descriptor, forever.
_TIMERS: weakref.WeakValueDictionary[int, _LoopTimer] = weakref.WeakValueDictionary()
_ORDER = itertools.count()  # waits for the same moment end in the order they were asked for


def _timer(loop: asyncio.AbstractEventLoop) -> _LoopTimer | None:
    timer = _TIMERS.get(id(loop))
    if timer is not None and timer.loop() is loop:
        return timer
    if _LIBC is None:
        return None
    fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
    if fd < 0:
        return None
    try:
        timer = _LoopTimer(loop, fd)
    except (NotImplementedError, OSError):  # a loop that cannot watch descriptors (Windows' proactor)
        os.close(fd)
        return None
    _TIMERS[id(loop)] = timer
    return timer


async def until(moment: float) -> None:
    """Return at `moment` (`time.perf_counter()` seconds), never before it."""
    if moment <= time.perf_counter():
        return
    loop = asyncio.get_running_loop()
    timer = _timer(loop)
    if timer is None:
        while (remaining := moment - time.perf_counter()) > 0:  # the loop's timers may wake a little early
            await asyncio.sleep(remaining)
        return
    future: asyncio.Future[None] = loop.create_future()
    timer.add(moment, future, next(_ORDER))
    await future
