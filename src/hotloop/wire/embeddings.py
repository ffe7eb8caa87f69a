"""The Embeddings API's wire shapes (OpenAI's `/v1/embeddings`), no I/O."""

from __future__ import annotations

from typing import Any

import msgspec

MAX_INPUTS = 2048  # OpenAI's bounds: texts per request, tokens per text
MAX_INPUT_TOKENS = 8192


class CreateEmbedding(msgspec.Struct, kw_only=True):
    input: Any = msgspec.UNSET  # a string or a list of strings (token arrays are refused: the model has its own)
    model: Any = msgspec.UNSET
    encoding_format: Any = "float"
    dimensions: Any = None
    user: Any = None


class Embedding(msgspec.Struct, kw_only=True):
    index: int
    embedding: list[float] | str  # floats, or base64 of little-endian float32 (`encoding_format: base64`)
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, kw_only=True):
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: str = "list"


create_decoder = msgspec.json.Decoder(CreateEmbedding)
