"""A replica's file_search: its ingestion workers and its search indexes, with what the metrics and the console
read of them (files ingested, in work, search latency). The console's records hold ids, sizes and times only:
never a file's name or text, which may be a user's data."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from hotloop.config import Settings
from hotloop.errors import InvalidParam, NotFound
from hotloop.observability.metrics import Metrics
from hotloop.pipeline.filesearch.embeddings import EmbeddedModel, Embeddings, UpstreamEmbeddings
from hotloop.pipeline.filesearch.index import Indexes
from hotloop.pipeline.filesearch.ingestion import Ingestion, IngestRecord
from hotloop.pipeline.filesearch.search import SearchOptions
from hotloop.stores.base import Store
from hotloop.stores.vector_stores import Claim
from hotloop.wire.vector_stores import SearchResult, TextContent

RECORDS_KEPT = 64  # the latest ingestions and searches the console lists
# A store's `last_active_at` (and so its expiry) moves by whole minutes: a search writes it at most once a minute.
ACTIVE_STEP_S = 60
LATENCIES_KEPT = 1024  # the last searches' latencies, for the console's percentiles


def embeddings_of(settings: Settings) -> Embeddings:
    """The embeddings the settings name: an upstream's (`file_search_embeddings_url`) or the embedded model."""
    if not settings.file_search_embeddings_url:
        return EmbeddedModel()
    return UpstreamEmbeddings(
        settings.file_search_embeddings_url,
        settings.file_search_embeddings_model,
        settings.file_search_embeddings_api_key,
        settings.file_search_embeddings_dimensions,
    )


def missing_store(store_id: str, param: str = "vector_store_id") -> NotFound:
    return NotFound(f"No vector store found with id '{store_id}'.", param=param, code="vector_store_not_found")


@dataclass(frozen=True, slots=True)
class SearchRecord:
    at: float
    owner: str
    vector_store_ids: tuple[str, ...]
    queries: int
    results: int
    seconds: float


class FileSearch:
    def __init__(self, store: Store, workers: int, metrics: Metrics, embeddings: Embeddings | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.embeddings = embeddings or EmbeddedModel()
        self.ingestion = Ingestion(store, workers, self, self.embeddings)
        self._indexes: Indexes | None = None
        self.ingestions: deque[IngestRecord] = deque(maxlen=RECORDS_KEPT)
        self.searches: deque[SearchRecord] = deque(maxlen=RECORDS_KEPT)
        self.latencies: deque[float] = deque(maxlen=LATENCIES_KEPT)

    def start(self) -> None:
        self.ingestion.start()

    async def stop(self) -> None:
        await self.ingestion.stop()
        await self.embeddings.close()

    def indexes(self) -> Indexes:
        if self._indexes is None:
            self._indexes = Indexes(self.store, self.embeddings)
        return self._indexes

    async def search(
        self,
        owner: str,
        store_ids: Sequence[str],
        queries: Sequence[str],
        options: SearchOptions,
        param: str = "vector_store_ids",
    ) -> list[SearchResult]:
        """The best chunks of `store_ids` (the owner's; another's or a missing one: NotFound naming `param`) for
        `queries`, best first, at most `options.max_num_results`, each with its file's id, name, attributes and a
        score between 0 and 1: what POST /v1/vector_stores/{id}/search and the file_search tool both run. Its CPU
        work runs off the event loop."""
        started = time.perf_counter()
        now = int(time.time())
        stale: list[str] = []  # stores whose `last_active_at` this search moves on
        for store_id in store_ids:
            store = await self.store.get_vector_store(owner, store_id, counted=False)
            if store is None:
                raise missing_store(store_id, param)
            if store.status == "expired":
                raise InvalidParam(f"Vector store '{store_id}' has expired.", param=param, code="vector_store_expired")
            if now - (store.last_active_at or 0) >= ACTIVE_STEP_S:
                stale.append(store_id)
        indexes = self.indexes()
        loaded = [await indexes.vectors(store_id) for store_id in store_ids]
        stores = [found for found in loaded if found is not None]
        if len(stores) != len(store_ids):  # deleted meanwhile
            raise missing_store(store_ids[loaded.index(None)], param)
        found = await indexes.search(stores, queries, options.filters, options.weights, options.max_num_results)
        found = [hit for hit in found if hit.score >= options.score_threshold]
        texts = await self.store.chunk_texts([hit.chunk_id for hit in found])
        for store_id in stale:
            await self.store.touch_vector_store(owner, store_id, now)
        seconds = time.perf_counter() - started
        self.latencies.append(seconds)
        self.searches.append(SearchRecord(time.time(), owner, tuple(store_ids), len(queries), len(found), seconds))
        self.metrics.file_search_seconds.observe(seconds)
        return [
            SearchResult(
                file_id=hit.file.file_id,
                filename=hit.file.filename,
                score=round(hit.score, 6),
                content=[TextContent(text=texts.get(hit.chunk_id, ""))],
                attributes=hit.file.attributes,
            )
            for hit in found
        ]

    # -- what Ingestion reports --------------------------------------------------------------------------------------

    def started(self, claim: Claim) -> IngestRecord:
        record = IngestRecord(time.time(), claim.owner, claim.vector_store_id, claim.file_id, claim.attempts)
        self.ingestions.append(record)
        self.metrics.files_ingesting.inc()
        return record

    def ended(self, record: IngestRecord, status: str, error: str | None = None) -> None:
        record.status, record.error = status, error
        record.seconds = time.time() - record.started_at
        self.metrics.files_ingesting.dec()
        self.metrics.files_ingested.labels(status).inc()
        if status == "completed":
            self.metrics.bytes_ingested.inc(record.bytes)
