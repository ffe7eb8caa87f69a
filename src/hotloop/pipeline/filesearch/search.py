"""What a search of vector stores asks beyond its queries: the endpoint's body and the file_search tool's fields
come to this one shape (pipeline/objects/vector_stores.py checks the one, tools/file_search.py the other)."""

from __future__ import annotations

from dataclasses import dataclass

from hotloop.filesearch.filters import Predicate
from hotloop.wire.vector_stores import DEFAULT_RESULTS


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """`filters` compiled (filesearch/filters.py), the results' count, the ranker (`auto`, `default-2024-11-15`,
    `none`: all one fused ranking here, no reranker), the score threshold (0 to 1) and the hybrid weights
    (`ranking_options.hybrid_search`: text, embedding)."""

    filters: Predicate | None = None
    max_num_results: int = DEFAULT_RESULTS
    ranker: str = "auto"
    score_threshold: float = 0.0
    weights: tuple[float, float] = (1.0, 1.0)
