"""The usage ledger: `record()` on the request path costs an append; a background task writes batches.

A batch is written when `batch` records are waiting or `flush_ms` after the oldest waiting one was recorded,
whichever comes first. A failed write is retried with backoff and its records stay buffered (never dropped).
`drain()` writes everything buffered and stops the writer; a `record()` after that is rejected (it returns
False and logs) because the sink — the store — is about to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from itertools import islice

from hotloop.metering.records import UsageRecord, UsageTotals

log = logging.getLogger("hotloop.ledger")

Sink = Callable[[list[UsageRecord]], Awaitable[None]]


class Ledger:
    def __init__(
        self,
        sink: Sink,
        batch: int,
        flush_ms: float,
        *,
        retry_initial_s: float = 0.05,
        retry_max_s: float = 5.0,
    ) -> None:
        self._sink = sink
        self.batch = max(1, batch)
        self.flush_s = max(0.0, flush_ms) / 1000.0
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        # (monotonic time recorded, record), oldest first; a record leaves only once its batch is written.
        self._buffer: deque[tuple[float, UsageRecord]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self.written = 0
        self.rejected = 0
        self.failures = 0
        # Running totals per owner since this process started (the console's "ledger per key").
        self.totals_by_owner: dict[str, UsageTotals] = {}

    @property
    def backlog(self) -> int:
        """Records not yet written (including a batch being written now)."""
        return len(self._buffer)

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Start the writer on the running loop (idempotent)."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="hotloop-ledger")

    def record(self, rec: UsageRecord) -> bool:
        """Buffer one record; never blocks, never raises. False (and logged) once the ledger has been drained."""
        try:
            if self._closed:
                self.rejected += 1
                log.error("usage record for %s after the ledger was drained: not written", rec.response_id)
                return False
            self._buffer.append((time.monotonic(), rec))
            self._count(rec)
            if len(self._buffer) == 1 or len(self._buffer) >= self.batch:
                self._wake.set()
            return True
        except Exception:  # pragma: no cover - an append and an Event.set do not fail; the caller must not see it
            log.exception("could not buffer usage record")
            return False

    def _count(self, rec: UsageRecord) -> None:
        totals = self.totals_by_owner.get(rec.owner)
        if totals is None:
            totals = self.totals_by_owner[rec.owner] = UsageTotals()
        totals.responses += 1
        totals.input_tokens += rec.input_tokens
        totals.cached_tokens += rec.cached_tokens
        totals.output_tokens += rec.output_tokens

    async def drain(self, timeout: float | None = None) -> None:
        """Write everything buffered, then stop (idempotent). Past `timeout` the writer stops and what is left is
        logged as lost."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if self._task is None:
            if not self._buffer:
                self._closed = True
                return
            self._task = asyncio.get_running_loop().create_task(self._run(), name="hotloop-ledger")
        task = self._task
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._closed = True
            log.error("usage ledger drain timed out: %d record(s) not written", len(self._buffer))

    async def _run(self) -> None:
        buffer = self._buffer
        while True:
            if not buffer:
                if self._closing:
                    self._closed = True  # in the same step as the empty check: no record slips in after
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(buffer) < self.batch and not self._closing:
                wait = buffer[0][0] + self.flush_s - time.monotonic()
                if wait > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                    continue
            chunk = [rec for _, rec in islice(buffer, self.batch)]
            await self._write(chunk)
            for _ in chunk:
                buffer.popleft()
            self.written += len(chunk)

    async def _write(self, chunk: list[UsageRecord]) -> None:
        """Write one batch, retrying with backoff until it is written."""
        delay = self._retry_initial_s
        while True:
            try:
                await self._sink(chunk)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("usage ledger: writing %d record(s) failed; retrying in %.2fs", len(chunk), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_max_s)
