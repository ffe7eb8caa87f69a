"""Waits that end at their moment (hotloop/clock.py): never before it, in the order asked, cancellable, on either
loop, with the timerfd and without it, its descriptor released; and hotloop-sim's first and last token on that
clock."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from hotloop import clock
from hotloop.backends.base import GenerationRequest, TextDelta
from hotloop.backends.sim.backend import SimBackend, SimSettings

pytestmark = pytest.mark.fast

LOOPS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    return LOOPS[request.param]


async def _lateness(delay: float) -> float:
    moment = time.perf_counter() + delay
    await clock.until(moment)
    return time.perf_counter() - moment


def test_a_wait_never_ends_before_its_moment(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    """Nothing to wait, a fraction of a millisecond, a few, and around 20 ms (hotloop-sim's first token): the loop's
    own timers wake up to a millisecond early or late at these lengths (clock.py)."""

    async def main() -> list[float]:
        return [await _lateness(delay) for delay in [0.0, 3e-5, 3e-4, 1.7e-3, 2.3e-3, 0.0197, 0.0203] * 3]

    late = run(main())
    assert min(late) >= 0.0, late
    assert max(late) < 0.5, late  # woken (precision is the benchmarks' business: docs/benchmarks-history.md)


def test_without_the_timerfd_a_wait_still_never_ends_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off Linux (or where no timerfd can be made) the loop's own timers, looped until the moment has passed."""
    monkeypatch.setattr(clock, "_LIBC", None)

    async def main() -> list[float]:
        return [await _lateness(delay) for delay in [3e-4, 1.7e-3, 0.0197, 0.0203] * 3]

    late = uvloop.run(main())
    assert min(late) >= 0.0, late


def _is_timerfd(fd: int) -> bool:
    """Whether `fd` is open on a timerfd: only hotloop/clock.py makes them in this process."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[timerfd]"
    except OSError:
        return False


def test_the_timerfd_lives_while_a_wait_does() -> None:
    async def main() -> tuple[int, bool]:
        waiting = asyncio.ensure_future(clock.until(time.perf_counter() + 0.003))
        await asyncio.sleep(0)
        fd = clock._TIMERS[id(asyncio.get_running_loop())].fd
        assert _is_timerfd(fd)
        await waiting
        return fd, id(asyncio.get_running_loop()) in clock._TIMERS

    fd, kept = uvloop.run(main())
    assert not kept
    assert not _is_timerfd(fd)


def test_waits_end_in_the_order_of_their_moments(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    async def main() -> tuple[list[int], list[float]]:
        base = time.perf_counter() + 0.2  # every wait is asked for before the first moment: none returns at once
        order = list(range(30))
        random.Random(7).shuffle(order)  # asked for out of order
        ended: list[int] = []
        late: list[float] = []

        async def wait(i: int) -> None:
            moment = base + i * 0.001
            await clock.until(moment)
            late.append(time.perf_counter() - moment)
            ended.append(i)

        await asyncio.gather(*(wait(i) for i in order))
        return ended, late

    ended, late = run(main())
    assert ended == sorted(ended)
    assert min(late) >= 0.0


def test_a_cancelled_wait_ends_at_once_and_the_clock_runs_on(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    async def main() -> tuple[float, float]:
        task = asyncio.create_task(clock.until(time.perf_counter() + 10.0))
        await asyncio.sleep(0.01)
        start = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.perf_counter() - start, await _lateness(0.003)

    took, late = run(main())
    assert took < 0.5
    assert 0.0 <= late < 0.5


def test_a_loop_that_closed_while_waiting_leaves_the_clock_working() -> None:
    async def abandon() -> int:
        waiting = asyncio.create_task(clock.until(time.perf_counter() + 0.02))
        await asyncio.sleep(0)
        assert not waiting.done()  # asyncio.run cancels it on its way out
        return clock._TIMERS[id(asyncio.get_running_loop())].fd

    fd = asyncio.run(abandon())
    gc.collect()  # the closed loop goes, and its timer's descriptor with it
    assert not _is_timerfd(fd)
    late = asyncio.run(_lateness(0.003))
    assert 0.0 <= late < 0.5


def _wait_in_child() -> float:
    return asyncio.run(_lateness(0.003))


def test_a_forked_child_has_a_clock_of_its_own() -> None:
    asyncio.run(_lateness(0.001))  # the parent's thread is running
    with multiprocessing.get_context("fork").Pool(1) as pool:
        late = pool.apply(_wait_in_child)
    assert 0.0 <= late < 0.5


def test_the_simulators_first_and_last_token_leave_when_due(run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
    """ttft 30 ms, then a token every 0.25 ms (4 000 tok/s): the first delta no sooner than 30 ms after the request
    reached the model, the tenth no sooner than 2.25 ms later. On the loop's timers alone uvloop sent the first one
    early now and then, and a token due within 0.5 ms left at once: the last one early."""
    backend = SimBackend(SimSettings(ttft_ms=30.0, tps=4000.0, output_tokens=10))

    async def main() -> list[list[float]]:
        rounds = []
        for _ in range(5):
            start = time.perf_counter()
            times: list[float] = []
            async for delta in backend.generate(GenerationRequest(prompt_tokens=[1, 2, 3])):
                if isinstance(delta, TextDelta):
                    times.append(time.perf_counter() - start)
            rounds.append(times)
        return rounds

    for times in run(main()):
        assert len(times) == 10
        assert times[0] >= 0.030, times
        assert times[-1] >= 0.030 + 9 / 4000.0, times
        assert times[-1] < 1.0
