"""The Embeddings API (`/v1/embeddings`) on the model file_search embeds with (filesearch/embed.py): OpenAI's shape,
so a client, or a peer server pointed at hotloop for its embeddings, uses it unchanged. The model ships in
wordllama's wheel; its name is `EMBEDDING_MODEL`, and it is not among /v1/models (which
lists the models that generate).

Embedding is CPU work (~1 MB of text a second on one core): it runs on a worker thread, one request at a time per
process, so a large request takes a core, never the event loop."""

from __future__ import annotations

import asyncio
import base64
import threading

import msgspec
import numpy as np

from hotloop.errors import InvalidParam, MissingParam, ModelNotFound
from hotloop.pipeline.service import Service
from hotloop.wire.embeddings import (
    MAX_INPUT_TOKENS,
    MAX_INPUTS,
    CreateEmbedding,
    Embedding,
    EmbeddingList,
    EmbeddingUsage,
    create_decoder,
)
from hotloop.wire.request import decode_body

EMBEDDING_MODEL = "wordllama-l2-supercat-256"
_ONE_AT_A_TIME = threading.Lock()  # taken on the worker thread: requests queue there, never on the event loop


def _texts(raw: object) -> list[str]:
    texts = [raw] if isinstance(raw, str) else raw
    if raw is msgspec.UNSET:
        raise MissingParam("Missing required parameter: 'input'.", param="input")
    if not isinstance(texts, list) or not texts:
        raise InvalidParam("input must be a string or a non-empty array of strings.", param="input")
    if len(texts) > MAX_INPUTS:
        raise InvalidParam(f"input may hold at most {MAX_INPUTS} texts.", param="input")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParam(
                "Each input must be a string: token arrays are not accepted by this model.", param=f"input[{index}]"
            )
        if not text:
            raise InvalidParam("An input may not be empty.", param=f"input[{index}]")
    return texts


def _checked(request: CreateEmbedding) -> tuple[list[str], bool, int | None]:
    if request.model is msgspec.UNSET:
        raise MissingParam("Missing required parameter: 'model'.", param="model")
    if request.model != EMBEDDING_MODEL:
        raise ModelNotFound(str(request.model))
    texts = _texts(request.input)
    if request.encoding_format not in ("float", "base64"):
        raise InvalidParam("encoding_format must be 'float' or 'base64'.", param="encoding_format")
    dims = request.dimensions
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= 256):
        raise InvalidParam("dimensions must be an integer from 1 to 256.", param="dimensions")
    return texts, request.encoding_format == "base64", dims


def _embed(texts: list[str], dims: int | None) -> tuple[np.ndarray, int]:
    with _ONE_AT_A_TIME:
        return _embed_now(texts, dims)


def _embed_now(texts: list[str], dims: int | None) -> tuple[np.ndarray, int]:
    from hotloop.filesearch.embed import default_embedder

    embedder = default_embedder()
    counts = [len(embedder.offsets(text)) for text in texts]
    for index, count in enumerate(counts):
        if count > MAX_INPUT_TOKENS:
            raise InvalidParam(
                f"input[{index}] has {count} tokens; at most {MAX_INPUT_TOKENS} are accepted.", param=f"input[{index}]"
            )
    vectors = embedder.embed(texts)
    if dims is not None and dims < vectors.shape[1]:  # the model is trained to be cut short (Matryoshka)
        vectors = vectors[:, :dims]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors.astype("<f4", copy=False), sum(counts)


async def create(service: Service, body: bytes) -> EmbeddingList:
    request = decode_body(create_decoder, body)
    texts, as_base64, dims = _checked(request)
    vectors, tokens = await asyncio.to_thread(_embed, texts, dims)
    data = [
        Embedding(
            index=index,
            embedding=base64.b64encode(row.tobytes()).decode() if as_base64 else row.tolist(),
        )
        for index, row in enumerate(vectors)
    ]
    return EmbeddingList(
        data=data, model=EMBEDDING_MODEL, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    )
