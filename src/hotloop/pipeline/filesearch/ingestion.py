"""Every replica's ingestion of vector stores' files: claim a file from the store (a lease, renewed while it works),
read its bytes, have a worker process extract, chunk and embed it (filesearch/ingest.py: off the event loop and
its GIL, at a lower priority), write its chunks in parts and complete it.

The store is the queue: a file added on any replica is taken by whichever replica claims it first; a replica that
dies mid-file leaves a lease that runs out, and the file is taken again (stores/vector_stores.py). `workers` bounds
the files in work at once on this replica (`file_search_workers`; 0: none here)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hotloop.errors import HotloopError
from hotloop.filesearch.embed import Vectors
from hotloop.filesearch.ingest import Ingested, ingest, start_worker
from hotloop.ids import new_id
from hotloop.pipeline.filesearch.embeddings import Embeddings
from hotloop.stores.base import Store
from hotloop.stores.vector_stores import LEASE_S, ChunkRow, Claim
from hotloop.wire.vector_stores import LastError

IDLE_POLL_S = 1.0  # how often an idle replica asks the store for work another replica added
SAVE_ROWS = 256  # chunks written per store write: no write holds the store long
log = logging.getLogger("hotloop.filesearch")


@dataclass(slots=True)
class IngestRecord:
    """One file's ingestion on this replica, as the console lists it: ids, sizes and times, never its name or text."""

    started_at: float
    owner: str
    vector_store_id: str
    file_id: str
    attempt: int
    status: str = "in_progress"
    bytes: int = 0
    chunks: int = 0
    seconds: float | None = None
    error: str | None = None


class Reporter(Protocol):
    """Who hears of each file's ingestion (runtime.py's `FileSearch`: the metrics and the console)."""

    def started(self, claim: Claim) -> IngestRecord: ...

    def ended(self, record: IngestRecord, status: str, error: str | None = None) -> None: ...


class Ingestion:
    def __init__(self, store: Store, workers: int, report: Reporter, embeddings: Embeddings) -> None:
        self.store = store
        self.embeddings = embeddings
        self.report = report
        self.workers = workers
        self._wake = asyncio.Event()
        self._pool: ProcessPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self.workers > 0:
            self._task = asyncio.get_running_loop().create_task(self._claim_forever(), name="hotloop-ingestion")

    def wake(self) -> None:
        """Files were added here: claim at once instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [task for task in (self._task, *self._running) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _claim_forever(self) -> None:
        while True:
            claim = None
            if len(self._running) < self.workers:
                try:
                    claim = await self.store.claim_file(new_id("lease"), time.time())
                except HotloopError as exc:  # the store is down: try again later
                    log.warning("could not claim a file to ingest: %s", exc.message)
            if claim is not None:
                task = asyncio.get_running_loop().create_task(self._ingest(claim))
                self._running.add(task)
                task.add_done_callback(self._finished)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), IDLE_POLL_S)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._wake.set()  # a worker is free

    async def _ingest(self, claim: Claim) -> None:
        renewing = asyncio.get_running_loop().create_task(self._renew(claim))
        record = self.report.started(claim)
        status, error = "lost", None
        try:
            status, error = await self._run(claim, record)
        except asyncio.CancelledError:
            raise  # shutting down: the lease runs out and a replica takes the file again
        except HotloopError as exc:  # the store: the lease runs out and the file is taken again
            log.warning("ingesting %s failed: %s", claim.file_id, exc.message)
            error = exc.message
        except Exception:
            log.exception("ingesting %s failed", claim.file_id)
            status, error = "failed", "The file could not be ingested."
            with contextlib.suppress(HotloopError):
                await self.store.fail_file(claim, LastError(code="server_error", message=error))
        finally:
            renewing.cancel()
            self.report.ended(record, status, error)

    async def _run(self, claim: Claim, record: IngestRecord) -> tuple[str, str | None]:
        """The file read, processed and written: its outcome and, when it failed, why."""
        file = await self.store.get_file(claim.owner, claim.file_id)
        if file is None:
            error = LastError(code="invalid_file", message="The file was deleted.")
            await self.store.fail_file(claim, error)
            return "failed", error.message
        content = b"".join([chunk async for chunk in self.store.file_content(claim.owner, file)])
        record.bytes = len(content)
        done = await self._work(file.filename, content, claim)
        if done.failure is not None:
            await self.store.fail_file(claim, LastError(code="unsupported_file", message=done.failure))
            return "failed", done.failure
        record.chunks = len(done.chunks)
        vectors, usage = await self._vectors(done)
        model = self.embeddings.name
        if await self._save(claim, done, vectors) and await self.store.complete_file(claim, usage, model):
            return "completed", None
        return "lost", None  # cancelled, removed or taken over meanwhile: nothing of it counts

    async def _work(self, filename: str, content: bytes, claim: Claim) -> Ingested:
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            try:
                in_worker = self.embeddings.in_worker
                return await loop.run_in_executor(
                    self._workers(), ingest, filename, content, claim.max_tokens, claim.overlap, in_worker
                )
            except BrokenProcessPool:  # a worker died (killed, out of memory): a fresh pool, once
                self._pool = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _workers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the server's threads (the store's writer, the tokenizers) must not be copied mid-lock
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=start_worker)
        return self._pool

    async def _vectors(self, done: Ingested) -> tuple[Vectors, int]:
        """The chunks' vectors (the worker's, or the embeddings upstream's) and the bytes the chunks take."""
        if self.embeddings.in_worker or not done.chunks:
            return np.frombuffer(done.vectors, dtype="<f4").reshape(len(done.chunks), -1), done.usage_bytes
        vectors = await self.embeddings.embed([text for _, _, text in done.chunks])
        return vectors.astype("<f4", copy=False), done.usage_bytes + vectors.nbytes

    async def _save(self, claim: Claim, done: Ingested, vectors: Vectors) -> bool:
        for first in range(0, len(done.chunks), SAVE_ROWS):
            rows = [
                ChunkRow(seq, start, end, text, vectors[seq].tobytes(), done.terms[seq])
                for seq, (start, end, text) in enumerate(done.chunks[first : first + SAVE_ROWS], start=first)
            ]
            if not await self.store.save_chunks(claim, rows):
                return False  # cancelled or removed meanwhile
        return True

    async def _renew(self, claim: Claim) -> None:
        while True:
            await asyncio.sleep(LEASE_S / 3)
            with contextlib.suppress(HotloopError):
                await self.store.renew_lease(claim, time.time())
