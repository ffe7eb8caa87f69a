"""The Vector Stores API's wire shapes (OpenAI's `VectorStore`, `VectorStoreFile`, `VectorStoreFileBatch`, a
search's results page, and the request bodies), no I/O. Filters stay raw here: filesearch/filters.py reads them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hotloop.errors import InvalidParam

Attributes = dict[str, str | float | bool]
LIST_LIMIT_MAX = 100  # OpenAI's bound for the vector stores' lists (default 20)
MAX_RESULTS = 50  # `max_num_results`: 1 to 50, default 10
DEFAULT_RESULTS = 10
BATCH_FILES_MAX = 2000  # the file ids one request may add (a store's create or a batch)
FileStatus = Literal["in_progress", "completed", "cancelled", "failed"]


class FileCounts(msgspec.Struct, kw_only=True):
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    total: int = 0


class ExpiresAfter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    anchor: str
    days: int


class StaticChunking(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    max_chunk_size_tokens: int = 800
    chunk_overlap_tokens: int = 400


class ChunkingStrategy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A request's `chunking_strategy` ({"type": "auto"} or {"type": "static", "static": {...}}), and what a
    vector store file says it was chunked with (always `static` with the sizes used, as OpenAI answers)."""

    type: str
    static: StaticChunking | None = None


class VectorStore(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    name: str
    file_counts: FileCounts
    usage_bytes: int = 0
    status: str = "completed"  # `in_progress` while any file is; `expired` past `expires_at`
    last_active_at: int | None = None
    metadata: dict[str, str] | None = None
    description: str | None = None
    expires_after: ExpiresAfter | None = None
    expires_at: int | None = None
    object: str = "vector_store"


class LastError(msgspec.Struct, kw_only=True):
    code: Literal["server_error", "unsupported_file", "invalid_file"]
    message: str


class VectorStoreFile(msgspec.Struct, kw_only=True):
    id: str  # the file's id
    vector_store_id: str
    created_at: int
    status: FileStatus = "in_progress"
    usage_bytes: int = 0
    last_error: LastError | None = None
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None
    object: str = "vector_store.file"


class VectorStoreFileBatch(msgspec.Struct, kw_only=True):
    id: str
    vector_store_id: str
    created_at: int
    file_counts: FileCounts
    status: FileStatus = "in_progress"
    object: str = "vector_store.files_batch"


class TextContent(msgspec.Struct):
    text: str
    type: str = "text"


class SearchResult(msgspec.Struct, kw_only=True):
    file_id: str
    filename: str
    score: float
    content: list[TextContent]
    attributes: Attributes | None = None


class SearchPage(msgspec.Struct, kw_only=True):
    search_query: list[str]
    data: list[SearchResult]
    has_more: bool = False
    next_page: str | None = None
    object: str = "vector_store.search_results.page"


class FileContentPage(msgspec.Struct, kw_only=True):
    data: list[TextContent]
    has_more: bool = False
    next_page: str | None = None
    object: str = "vector_store.file_content.page"


# -- request bodies: unknown fields are refused with a 400 naming them (transports decode with these) -----------------


class CreateStore(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str | None = None
    description: str | None = None
    file_ids: list[str] | None = None
    chunking_strategy: ChunkingStrategy | None = None
    expires_after: ExpiresAfter | None = None
    metadata: dict[str, str] | None = None


class UpdateStore(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str | None = None
    expires_after: ExpiresAfter | msgspec.UnsetType | None = msgspec.UNSET
    metadata: dict[str, str] | None = None


class CreateFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    file_id: str
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None


class UpdateFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    attributes: Attributes | None


class BatchFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    file_id: str
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None


class CreateBatch(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    file_ids: list[str] | None = None
    files: list[BatchFile] | None = None
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None


class RankingOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ranker: str | None = None
    score_threshold: float | None = None
    hybrid_search: HybridWeights | None = None


class HybridWeights(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    embedding_weight: float
    text_weight: float


def ranking(
    options: RankingOptions | None, param: str, rankers: tuple[str, ...]
) -> tuple[str, float, tuple[float, float]]:
    """Ranking options checked, for the search endpoint and the file_search tool alike (a 400 naming the field under
    `param`): the ranker (one of `rankers`), the score threshold (0 to 1) and the hybrid weights as (text,
    embedding), each at least 0 and not both 0."""
    if options is None:
        return "auto", 0.0, (1.0, 1.0)
    ranker = options.ranker or "auto"
    if ranker not in rankers:
        raise InvalidParam(f"ranker must be one of {', '.join(rankers)}.", param=f"{param}.ranker")
    threshold = options.score_threshold or 0.0
    if not 0.0 <= threshold <= 1.0:
        raise InvalidParam("score_threshold must be between 0 and 1.", param=f"{param}.score_threshold")
    weights = (1.0, 1.0)
    if options.hybrid_search is not None:
        weights = (options.hybrid_search.text_weight, options.hybrid_search.embedding_weight)
        if min(weights) < 0 or sum(weights) <= 0:
            raise InvalidParam(
                "hybrid_search weights must be at least 0, and not both 0.", param=f"{param}.hybrid_search"
            )
    return ranker, threshold, weights


class Search(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int = DEFAULT_RESULTS
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False


store_decoder = msgspec.json.Decoder(VectorStore)
file_decoder = msgspec.json.Decoder(VectorStoreFile)
batch_decoder = msgspec.json.Decoder(VectorStoreFileBatch)
