"""A text cut into overlapping windows of tokens, as OpenAI's `static` chunking strategy does (`auto`: 800 tokens,
400 of overlap). Windows are cut at token boundaries of the embedding model's own tokenizer, and each chunk is the
file's text, unchanged, from its first token's start to its last token's end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

AUTO_TOKENS, AUTO_OVERLAP = 800, 400
MIN_TOKENS, MAX_TOKENS = 100, 4096  # OpenAI's bounds for `max_chunk_size_tokens`


class Offsets(Protocol):
    """A tokenizer that gives each token's (start, end) character offsets (Hugging Face `tokenizers`' Encoding)."""

    def offsets(self, text: str) -> list[tuple[int, int]]: ...


@dataclass(frozen=True, slots=True)
class Strategy:
    max_tokens: int = AUTO_TOKENS
    overlap: int = AUTO_OVERLAP

    def __post_init__(self) -> None:
        if not MIN_TOKENS <= self.max_tokens <= MAX_TOKENS:
            raise ValueError(f"max_chunk_size_tokens must be between {MIN_TOKENS} and {MAX_TOKENS}.")
        if not 0 <= self.overlap <= self.max_tokens // 2:
            raise ValueError("chunk_overlap_tokens must be at most half of max_chunk_size_tokens.")


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    start: int  # character offsets in the file's text
    end: int
    tokens: int
    first: int = 0  # token indexes in the file's tokens: [first, first + tokens)


def chunks(text: str, tokenizer: Offsets, strategy: Strategy = Strategy()) -> list[Chunk]:
    return windows(text, np.asarray(tokenizer.offsets(text), dtype=np.int64).reshape(-1, 2), strategy)


def windows(text: str, spans: npt.NDArray[np.int64], strategy: Strategy = Strategy()) -> list[Chunk]:
    """The chunks of a text whose tokens' character spans are `spans` ((tokens, 2): start, end)."""
    if not len(spans):
        return []
    step = strategy.max_tokens - strategy.overlap
    out: list[Chunk] = []
    for first in range(0, len(spans), step):
        window = spans[first : first + strategy.max_tokens]
        start, end = int(window[0, 0]), int(window[-1, 1])
        out.append(Chunk(text[start:end], start, end, len(window), first))
        if first + strategy.max_tokens >= len(spans):
            break
    return out
