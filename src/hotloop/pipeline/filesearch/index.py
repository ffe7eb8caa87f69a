"""A search of vector stores: BM25 over the chunks' terms (filesearch/lexical.py) and cosine over their vectors (in
float16), both held in each replica's memory, fused by reciprocal rank (filesearch/hybrid.py's `fuse`), each query
of a list fused the same way. Both stores (SQLite, PostgreSQL) thus rank alike.

A store's index is loaded once per replica and kept while its `index_version` stands: a file completed, removed
or given new attributes changes it, and the next search reads only the files that changed (by the ingestion that
made them) and rebuilds the in-memory index from what it keeps. Scoring and rebuilding run on a worker thread
(numpy releases the GIL), never on the event loop."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import simsimd

from hotloop.filesearch.embed import Vectors
from hotloop.filesearch.filters import Predicate
from hotloop.filesearch.hybrid import CANDIDATES, RRF_K, Hit, fuse
from hotloop.filesearch.lexical import LexicalIndex, Terms, query_terms
from hotloop.filesearch.topk import top
from hotloop.pipeline.filesearch.embeddings import Embeddings
from hotloop.stores.vector_stores import StoredFile, VectorStoreStore

log = logging.getLogger("hotloop.filesearch")
KEPT_STORES = 64  # vector stores whose vectors a replica keeps in memory, least recently searched dropped first
# The vector ranking reads every chunk's vector: in float16 (half numpy's float32 bytes, which the scan is bound by)
# through simsimd's SIMD dot products on this many threads (float32 sums: a score within 1e-4 of float32's).
THREADS = min(2, os.cpu_count() or 1)
Half = npt.NDArray[np.float16]


@dataclass(frozen=True, slots=True)
class FileChunks:
    """One completed file's chunks as the index keeps them, by the ingestion that made them (`generation`)."""

    generation: str
    model: str  # the embedding model of `vectors`
    ids: npt.NDArray[np.int64]
    vectors: Vectors
    terms: list[Terms]


@dataclass(slots=True)
class StoreVectors:
    """One vector store's completed files and their chunks' vectors, rows in file order."""

    version: int
    files: list[StoredFile]
    by_file: dict[str, FileChunks]
    ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    file_of: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    matrix: Half = field(default_factory=lambda: np.zeros((0, 0), np.float16))  # every vector, in float16
    order: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))  # rows sorted by chunk id
    lexical: LexicalIndex = field(default_factory=lambda: LexicalIndex([]))

    def assemble(self, model: str) -> int:
        """The store's arrays from its files'; a file whose vectors are another model's gets zero rows (it is
        found by its words only). Returns how many files that is."""
        parts = [self.by_file[file.file_id] for file in self.files]
        dims = next((part.vectors.shape[1] for part in parts if part.model == model and len(part.ids)), 0)
        ours = [part.model == model and part.vectors.shape[1] == dims for part in parts]
        rows = [
            part.vectors if mine else np.zeros((len(part.ids), dims), np.float32)
            for part, mine in zip(parts, ours, strict=True)
        ]
        self.ids = np.concatenate([part.ids for part in parts]) if parts else np.zeros(0, np.int64)
        self.matrix = (np.concatenate(rows) if parts else np.zeros((0, dims), np.float32)).astype(np.float16)
        self.file_of = np.repeat(np.arange(len(parts), dtype=np.int32), [len(part.ids) for part in parts])
        self.order = np.argsort(self.ids, kind="stable")
        self.lexical = LexicalIndex([terms for part in parts for terms in part.terms])
        return ours.count(False)

    def rows(self, chunk_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The rows of `chunk_ids` (-1 for a chunk not here: its file is not completed)."""
        if not len(self.ids):
            return np.full(len(chunk_ids), -1, np.int64)
        at = np.searchsorted(self.ids, chunk_ids, sorter=self.order)
        at = np.minimum(at, len(self.ids) - 1)
        found = self.order[at]
        return np.where(self.ids[found] == chunk_ids, found, -1)


@dataclass(frozen=True, slots=True)
class Found:
    chunk_id: int
    file: StoredFile
    score: float  # 0 to 1: 1 is first in every ranking of every query


class Indexes:
    def __init__(self, store: VectorStoreStore, embeddings: Embeddings) -> None:
        self.store = store
        self.embeddings = embeddings
        self._kept: OrderedDict[str, StoreVectors] = OrderedDict()
        self._loading: dict[str, asyncio.Lock] = {}

    async def vectors(self, store_id: str) -> StoreVectors | None:
        version = await self.store.index_version(store_id)
        if version is None:
            self._kept.pop(store_id, None)
            return None
        kept = self._kept.get(store_id)
        if kept is None or kept.version != version:
            lock = self._loading.setdefault(store_id, asyncio.Lock())
            async with lock:
                kept = self._kept.get(store_id)
                if kept is None or kept.version != version:
                    kept = await self._load(store_id, version, kept)
        self._kept[store_id] = kept
        self._kept.move_to_end(store_id)
        while len(self._kept) > KEPT_STORES:
            self._kept.popitem(last=False)
        return kept

    async def _load(self, store_id: str, version: int, old: StoreVectors | None) -> StoreVectors:
        files = await self.store.stored_files(store_id)
        by_file: dict[str, FileChunks] = {}
        for file in files:
            had = old.by_file.get(file.file_id) if old is not None else None
            if had is not None and had.generation == file.generation:
                by_file[file.file_id] = had
                continue
            ids, blob, terms = await self.store.chunk_vectors(store_id, file.file_id)
            matrix = np.frombuffer(blob, dtype="<f4").reshape(len(ids), -1)
            found = [np.frombuffer(one, dtype="<u4") for one in terms]
            by_file[file.file_id] = FileChunks(file.generation, file.model, np.asarray(ids, np.int64), matrix, found)
        loaded = StoreVectors(version, files, by_file)
        others = await asyncio.to_thread(loaded.assemble, self.embeddings.name)
        if others:
            log.warning(
                "vector store %s: %d files' vectors are of another embedding model than %s; they are found by their "
                "words only until they are added again",
                store_id,
                others,
                self.embeddings.name,
            )
        return loaded

    async def search(
        self,
        stores: Sequence[StoreVectors],
        queries: Sequence[str],
        allow: Predicate | None,
        weights: tuple[float, float],
        limit: int,
    ) -> list[Found]:
        """The best `limit` chunks of `stores` for `queries`, scored 0 to 1 (`weights`: text, embedding)."""
        masks = [_mask(store, allow) for store in stores]
        depth = max(limit, CANDIDATES)
        query_vectors = await self.embeddings.embed(list(queries))
        rankings: list[list[Hit]] = []
        used: list[float] = []
        for query, vector in zip(queries, query_vectors, strict=True):
            # The two rankings on two worker threads at once (numpy releases the GIL): on two cores, the vector
            # scan (the larger, a read of every vector) and BM25 overlap. A ranking weighed 0 is not computed.
            text_weight, vector_weight = weights
            lexical, semantic = await asyncio.gather(
                _ranked(text_weight, _lexical_ranking, stores, masks, query_terms(query), depth),
                _ranked(vector_weight, _vector_ranking, stores, masks, vector, depth),
            )
            rankings += [lexical, semantic]
            used += list(weights)
        fused = fuse(rankings, used)
        best = sum(used) / (RRF_K + 1) or 1.0
        return [Found(hit.index % _SPAN, _file(stores, hit.index), hit.score / best) for hit in fused[:limit]]


# A hit's index is its store's position and its chunk's id packed together, so one fusion ranks every store's.
_SPAN = 1 << 40


def _key(stores: Sequence[StoreVectors], which: int, row: int) -> int:
    return which * _SPAN + int(stores[which].ids[row])


def _file(stores: Sequence[StoreVectors], key: int) -> StoredFile:
    store = stores[key // _SPAN]
    row = int(store.rows(np.asarray([key % _SPAN], np.int64))[0])
    return store.files[int(store.file_of[row])]


def _mask(store: StoreVectors, allow: Predicate | None) -> npt.NDArray[np.bool_] | None:
    if allow is None:
        return None
    allowed = np.asarray([allow(file.attributes or {}) for file in store.files] or [False], dtype=np.bool_)
    return allowed[store.file_of] if len(store.file_of) else np.zeros(0, np.bool_)


async def _ranked(weight: float, rank: Callable[..., list[Hit]], *args: Any) -> list[Hit]:
    return await asyncio.to_thread(rank, *args) if weight > 0 else []


def _lexical_ranking(
    stores: Sequence[StoreVectors], masks: list[npt.NDArray[np.bool_] | None], wanted: Terms, depth: int
) -> list[Hit]:
    """One query's BM25 ranking over every store, `depth` deep (filtered rows left out)."""
    hits: list[Hit] = []
    for which, store in enumerate(stores):
        if len(store.ids):
            hits += _best(stores, which, store.lexical.scores(wanted), masks[which], depth, positive=True)
    hits.sort(key=lambda hit: -hit.score)
    return hits[:depth]


def _vector_ranking(
    stores: Sequence[StoreVectors], masks: list[npt.NDArray[np.bool_] | None], vector: Vectors, depth: int
) -> list[Hit]:
    """One query's cosine ranking over every store, `depth` deep (a store with no file of this model's vectors
    has none)."""
    hits: list[Hit] = []
    query = vector.astype(np.float16)[None, :]
    for which, store in enumerate(stores):
        if len(store.ids) and store.matrix.shape[1] == len(vector):
            scores = np.asarray(simsimd.cdist(query, store.matrix, metric="dot", threads=THREADS, out_dtype="float32"))
            hits += _best(stores, which, scores[0], masks[which], depth, positive=False)
    hits.sort(key=lambda hit: -hit.score)
    return hits[:depth]


def _best(
    stores: Sequence[StoreVectors],
    which: int,
    scores: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_] | None,
    depth: int,
    positive: bool,
) -> list[Hit]:
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    best = top(scores, depth, above=0.0 if positive else -np.inf)
    return [Hit(_key(stores, which, int(row)), float(scores[row])) for row in best]
