"""Hybrid retrieval over a set of chunks: BM25 on their words and cosine on their vectors, the two rankings fused by
reciprocal rank (RRF: each chunk scores Σ weight / (k + rank) over the rankings it is in). Lexical search finds the
exact terms a question shares with a chunk (names, error messages, identifiers); the vectors find chunks that say
the same in other words. Fusing ranks, not scores, needs no calibration between the two.

This is the in-memory form, which the stores' indexes (FTS5, PostgreSQL's full text) will feed with the same
fusion; `Ranker` names the rankings a search may ask for (`ranking_options.ranker`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from hotloop.filesearch.embed import Embedder, Vectors

Ranker = Literal["hybrid", "lexical", "vector"]
RRF_K = 60  # the constant of Cormack et al.; smaller favours each ranking's top
CANDIDATES = 50  # how deep each ranking is read before fusing
_WORD = re.compile(r"\w+")
# Common English words that carry no topic: left out of the BM25 index and the queries.
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def words(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in _STOP]


@dataclass(frozen=True, slots=True)
class Hit:
    index: int  # the chunk's position in the index
    score: float


class HybridIndex:
    def __init__(
        self, texts: Sequence[str], vectors: Vectors, embedder: Embedder, weights: tuple[float, float] = (1.0, 1.0)
    ) -> None:
        import bm25s

        self.embedder = embedder
        self.vectors = vectors
        self.weights = weights  # lexical, vector
        corpus = [words(text) or ["_"] for text in texts]
        self._vocabulary = {word: n for n, word in enumerate(sorted({word for doc in corpus for word in doc}))}
        self._bm25: Any = bm25s.BM25()
        ids = [[self._vocabulary[word] for word in doc] for doc in corpus]
        self._bm25.index(bm25s.tokenization.Tokenized(ids=ids, vocab=self._vocabulary), show_progress=False)
        self.size = len(texts)

    def lexical(self, query: str, k: int) -> list[Hit]:
        ids = [self._vocabulary[word] for word in words(query) if word in self._vocabulary]
        if not ids or not self.size:
            return []
        scores = np.asarray(self._bm25.get_scores(ids))
        return _top(scores, k, positive=True)

    def vector(self, query: str, k: int) -> list[Hit]:
        if not self.size:
            return []
        query_vector = self.embedder.embed([query])[0]
        return _top(self.vectors @ query_vector, k, positive=False)

    def search(self, query: str, k: int, ranker: Ranker = "hybrid") -> list[Hit]:
        if ranker == "lexical":
            return self.lexical(query, k)
        if ranker == "vector":
            return self.vector(query, k)
        depth = max(k, CANDIDATES)
        return fuse([self.lexical(query, depth), self.vector(query, depth)], self.weights)[:k]


def fuse(rankings: Sequence[list[Hit]], weights: Sequence[float], k: int = RRF_K) -> list[Hit]:
    """Reciprocal rank fusion; ties keep the first ranking's order."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, hit in enumerate(ranking):
            scores[hit.index] = scores.get(hit.index, 0.0) + weight / (k + rank + 1)
    return [Hit(index, score) for index, score in sorted(scores.items(), key=lambda pair: -pair[1])]


def _top(scores: np.ndarray, k: int, positive: bool) -> list[Hit]:
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [Hit(int(i), float(scores[i])) for i in best if not positive or scores[i] > 0]
