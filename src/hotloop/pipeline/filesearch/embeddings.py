"""Where file_search's vectors come from: the embedded model (filesearch/embed.py, the default, run in the worker
process with the chunking and on a worker thread for queries), or, for production, any OpenAI-compatible
`/v1/embeddings` upstream (vLLM, llama.cpp's server, TEI, Ollama, OpenAI itself): setting
`file_search_embeddings_url` (docs/file-search.md, "Embeddings").

With an upstream, the worker process still extracts and chunks (token windows of the embedded model's tokenizer)
and takes the terms; the chunks' texts are then embedded by the upstream, in batches, from the event loop (network
time, no CPU). Each vector is normalized again here, so a dot product is the cosine whatever the upstream returns."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import httpx
import msgspec
import numpy as np

from hotloop.errors import HotloopError
from hotloop.filesearch.embed import Vectors

BATCH = 64  # texts per upstream request
TIMEOUT_S = 60.0


class EmbeddingsFailed(HotloopError):
    """502: the embeddings upstream did not answer with vectors (a search fails with it; an ingestion's lease runs
    out and the file is taken again, up to its attempts)."""

    status = 502
    type = "server_error"
    code = "embeddings_upstream_error"


class Embeddings(Protocol):
    name: str  # the model the vectors are of: a store's files embedded with another are left out of the vectors
    in_worker: bool  # whether the ingestion's worker process embeds (the embedded model) or this does

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-length float32 row per text."""
        ...

    async def close(self) -> None: ...


class EmbeddedModel:
    name = "wordllama-l2-supercat-256"
    in_worker = True

    async def embed(self, texts: Sequence[str]) -> Vectors:
        from hotloop.filesearch.embed import default_embedder  # numpy and the model: loaded on the first use

        return await asyncio.to_thread(lambda: default_embedder().embed(list(texts)))  # one hop, loaded once

    async def close(self) -> None:
        pass


class _Row(msgspec.Struct):
    index: int
    embedding: list[float]


class _Reply(msgspec.Struct):
    data: list[_Row]


_decode_reply = msgspec.json.Decoder(_Reply).decode


class UpstreamEmbeddings:
    in_worker = False

    def __init__(self, url: str, model: str, api_key: str = "", dimensions: int = 0) -> None:
        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.name = f"{model}:{dimensions}" if dimensions else model  # a model cut to fewer dimensions is another
        self.dimensions = dimensions
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=TIMEOUT_S)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        parts = [await self._batch(list(texts[first : first + BATCH])) for first in range(0, len(texts), BATCH)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dimensions or 1), np.float32)

    async def _batch(self, texts: list[str]) -> Vectors:
        body: dict[str, object] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        try:
            reply = await self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise EmbeddingsFailed(f"The embeddings upstream could not be reached: {type(exc).__name__}.") from None
        if reply.status_code != 200:
            raise EmbeddingsFailed(f"The embeddings upstream answered {reply.status_code}.")
        try:
            rows = sorted(_decode_reply(reply.content).data, key=lambda row: row.index)
        except msgspec.DecodeError as exc:
            raise EmbeddingsFailed(f"The embeddings upstream's answer could not be read: {exc}.") from None
        if len(rows) != len(texts) or len({len(row.embedding) for row in rows}) != 1:
            raise EmbeddingsFailed("The embeddings upstream answered with other vectors than it was asked for.")
        vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    async def close(self) -> None:
        await self._client.aclose()
