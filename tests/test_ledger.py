"""The usage ledger without a server: batching, flush deadline, retries, drain, and record() after drain."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from hotloop.metering.ledger import Ledger
from hotloop.metering.records import UsageRecord, record_for
from hotloop.wire.response import Response, Usage

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


def rec(n: int) -> UsageRecord:
    return UsageRecord(
        response_id=f"resp_{n}",
        owner="o",
        model="m",
        status="completed",
        input_tokens=n,
        cached_tokens=0,
        output_tokens=1,
        created_at=time.time(),
        transport="http",
    )


class Sink:
    """Collects written batches; fails the first `failures` calls; each call may take `delay` seconds."""

    def __init__(self, failures: int = 0, delay: float = 0.0) -> None:
        self.batches: list[list[UsageRecord]] = []
        self.calls = 0
        self.failures = failures
        self.delay = delay
        self.times: list[float] = []

    async def __call__(self, records: list[UsageRecord]) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.calls <= self.failures:
            raise OSError("disk on fire")
        self.times.append(time.monotonic())
        self.batches.append(list(records))

    @property
    def ids(self) -> list[str]:
        return [r.response_id for batch in self.batches for r in batch]


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_record_is_synchronous_and_buffers() -> None:
    sink = Sink()
    ledger = Ledger(sink, batch=10, flush_ms=60_000)
    ledger.start()
    assert ledger.record(rec(1)) is True
    assert ledger.backlog == 1 and sink.calls == 0  # nothing written on the caller's step
    await ledger.drain()
    assert sink.ids == ["resp_1"] and ledger.backlog == 0


async def test_full_batches_go_without_waiting_for_the_deadline() -> None:
    sink = Sink()
    ledger = Ledger(sink, batch=3, flush_ms=60_000)
    ledger.start()
    for n in range(7):
        ledger.record(rec(n))
    # Once both batches are counted written, the writer has nothing to await but the 7th's deadline (or a wake).
    await until(lambda: ledger.written == 6)
    assert [len(batch) for batch in sink.batches] == [3, 3]
    assert ledger.backlog == 1 and len(sink.batches) == 2  # the 7th waits for its deadline (or the drain)
    await ledger.drain()
    assert [len(batch) for batch in sink.batches] == [3, 3, 1]
    assert sink.ids == [f"resp_{n}" for n in range(7)]


async def test_a_partial_batch_waits_at_least_flush_ms() -> None:
    sink = Sink()
    ledger = Ledger(sink, batch=100, flush_ms=200)
    ledger.start()
    recorded = time.monotonic()
    ledger.record(rec(1))
    ledger.record(rec(2))
    await until(lambda: sink.batches)
    assert sink.times[0] - recorded >= 0.2  # a lower bound only
    assert sink.ids == ["resp_1", "resp_2"]  # one batch
    # The next record starts a new deadline.
    again = time.monotonic()
    ledger.record(rec(3))
    await until(lambda: len(sink.batches) == 2)
    assert sink.times[1] - again >= 0.2
    await ledger.drain()


async def test_a_failing_sink_is_retried_and_nothing_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink(failures=2)
    ledger = Ledger(sink, batch=4, flush_ms=10, retry_initial_s=0.01)
    ledger.start()
    with caplog.at_level(logging.ERROR, "hotloop.ledger"):
        for n in range(10):
            ledger.record(rec(n))
        await ledger.drain()
    assert sink.calls == 3 + 2  # 3 batches (4, 4, 2), the first tried 3 times
    assert ledger.failures == 2 and "retrying" in caplog.text
    assert sorted(sink.ids) == sorted(f"resp_{n}" for n in range(10))
    assert len(sink.ids) == 10 and ledger.written == 10 and ledger.backlog == 0


async def test_drain_writes_everything_and_is_idempotent() -> None:
    sink = Sink(delay=0.01)
    ledger = Ledger(sink, batch=7, flush_ms=60_000)
    ledger.start()
    for n in range(50):
        ledger.record(rec(n))
    # Records arriving while a batch is being written are kept too.
    await until(lambda: sink.calls > 0)  # the first batch is in the sink (for its `delay`)
    for n in range(50, 60):
        ledger.record(rec(n))
    started = time.monotonic()
    await asyncio.gather(ledger.drain(), ledger.drain())
    assert time.monotonic() - started < 30  # not held to the 60 s deadline
    assert sink.ids == [f"resp_{n}" for n in range(60)]
    assert all(len(batch) <= 7 for batch in sink.batches)
    await ledger.drain()
    assert ledger.closed and ledger.backlog == 0


async def test_drain_without_start_still_writes() -> None:
    sink = Sink()
    ledger = Ledger(sink, batch=10, flush_ms=60_000)
    ledger.record(rec(1))
    await ledger.drain()
    assert sink.ids == ["resp_1"]
    empty = Ledger(Sink(), batch=10, flush_ms=10)
    await empty.drain()
    assert empty.closed


async def test_record_after_drain_is_rejected_not_silently_lost(caplog: pytest.LogCaptureFixture) -> None:
    """Decision: drain is final (the store closes next). A late record() returns False, is counted and logged."""
    sink = Sink()
    ledger = Ledger(sink, batch=10, flush_ms=10)
    ledger.start()
    ledger.record(rec(1))
    await ledger.drain()
    with caplog.at_level(logging.ERROR, "hotloop.ledger"):
        assert ledger.record(rec(2)) is False
    assert ledger.rejected == 1 and "resp_2" in caplog.text
    assert ledger.backlog == 0 and sink.ids == ["resp_1"]
    writers = {task for task in asyncio.all_tasks() if task.get_name() == "hotloop-ledger"}
    ledger.start()  # cannot restart a drained ledger: no writer is started, a record is still rejected
    assert {task for task in asyncio.all_tasks() if task.get_name() == "hotloop-ledger"} == writers
    assert ledger.record(rec(3)) is False and ledger.rejected == 2
    assert sink.ids == ["resp_1"]


async def test_drain_timeout_gives_up_on_a_dead_sink(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink(failures=10**9)
    ledger = Ledger(sink, batch=10, flush_ms=10, retry_initial_s=0.01, retry_max_s=0.02)
    ledger.start()
    ledger.record(rec(1))
    with caplog.at_level(logging.ERROR, "hotloop.ledger"):
        await ledger.drain(timeout=0.3)
    assert ledger.closed and ledger.backlog == 1 and "not written" in caplog.text
    assert ledger.record(rec(2)) is False


def test_record_for_copies_the_response_usage() -> None:
    response = Response(id="resp_x", created_at=0, model="hotloop-sim", status="completed", usage=Usage.of(10, 4, 3))
    record = record_for(response, "owner-hash", "sse", {"total_ms": 1.5})
    assert (record.response_id, record.owner, record.model, record.status, record.transport) == (
        "resp_x",
        "owner-hash",
        "hotloop-sim",
        "completed",
        "sse",
    )
    assert (record.input_tokens, record.cached_tokens, record.output_tokens) == (10, 4, 3)
    assert record.timings == {"total_ms": 1.5} and record.created_at > 0
    failed = record_for(Response(id="resp_y", created_at=0, model="m", status="failed"), "", "http")
    assert (failed.input_tokens, failed.cached_tokens, failed.output_tokens, failed.timings) == (0, 0, 0, {})
