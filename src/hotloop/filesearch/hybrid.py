"""Hybrid retrieval's fusion: the lexical ranking (lexical.py's BM25) and the vector ranking (cosine on embed.py's
vectors) fused by reciprocal rank (RRF: each chunk scores Σ weight / (k + rank) over the rankings it is in).
Lexical search finds the exact terms a question shares with a chunk (names, error messages, identifiers); the
vectors find chunks that say the same in other words. Fusing ranks, not scores, needs no calibration between the
two. A query list fuses every query's two rankings the same way (pipeline/filesearch/index.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RRF_K = 60  # the constant of Cormack et al.; smaller favours each ranking's top
CANDIDATES = 50  # how deep each ranking is read before fusing


@dataclass(frozen=True, slots=True)
class Hit:
    index: int  # the chunk's key in the rankings
    score: float


def fuse(rankings: Sequence[list[Hit]], weights: Sequence[float], k: int = RRF_K) -> list[Hit]:
    """Reciprocal rank fusion; ties keep the first ranking's order."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        if weight <= 0:
            continue
        for rank, hit in enumerate(ranking):
            scores[hit.index] = scores.get(hit.index, 0.0) + weight / (k + rank + 1)
    return [Hit(index, score) for index, score in sorted(scores.items(), key=lambda pair: -pair[1])]
