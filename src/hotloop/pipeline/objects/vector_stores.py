"""The Vector Stores API (`/v1/vector_stores`, with its `/files`, `/file_batches` and `/search`). Everything is
checked before anything is stored; files are added `in_progress` and ingested in the background
(pipeline/filesearch/ingestion.py); a search reads only completed files (pipeline/filesearch/: the search the
file_search tool runs too). Another key's store reads as missing (404), never as forbidden."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from hotloop.errors import InvalidParam, NotFound
from hotloop.filesearch.chunk import MAX_TOKENS, MIN_TOKENS
from hotloop.filesearch.filters import compile_filter
from hotloop.filesearch.lexical import words
from hotloop.ids import new_id
from hotloop.pipeline.filesearch.runtime import missing_store
from hotloop.pipeline.filesearch.search import SearchOptions
from hotloop.pipeline.service import Service
from hotloop.stores.vector_stores import Order
from hotloop.wire.lists import Deleted, ObjectList, listed
from hotloop.wire.vector_stores import (
    BATCH_FILES_MAX,
    MAX_RESULTS,
    Attributes,
    ChunkingStrategy,
    CreateBatch,
    CreateFile,
    CreateStore,
    ExpiresAfter,
    FileContentPage,
    FileCounts,
    Search,
    SearchPage,
    StaticChunking,
    TextContent,
    UpdateStore,
    VectorStore,
    VectorStoreFile,
    VectorStoreFileBatch,
    ranking,
)

MAX_NAME = 256
MAX_QUERIES = 16  # a search's query list, at most
MAX_QUERY_CHARS = 4096
RANKERS = ("auto", "default-2024-11-15", "none")


def _missing_file(file_id: str, param: str = "file_id") -> NotFound:
    return NotFound(f"No file found with id '{file_id}'.", param=param, code="file_not_found")


# -- checks at the door -------------------------------------------------------------------------------------------


def check_metadata(metadata: dict[str, str] | None, param: str = "metadata") -> None:
    if metadata is None:
        return
    if len(metadata) > 16:
        raise InvalidParam("metadata holds at most 16 keys.", param=param)
    for key, value in metadata.items():
        if len(key) > 64 or len(value) > 512:
            raise InvalidParam("metadata keys hold at most 64 characters, values 512.", param=f"{param}.{key[:64]}")


def check_attributes(attributes: Attributes | None, param: str = "attributes") -> None:
    if attributes is None:
        return
    if len(attributes) > 16:
        raise InvalidParam("attributes holds at most 16 keys.", param=param)
    for key, value in attributes.items():
        if not key or len(key) > 64:
            raise InvalidParam("attributes keys hold 1 to 64 characters.", param=param)
        if isinstance(value, str) and len(value) > 512:
            raise InvalidParam("attributes string values hold at most 512 characters.", param=f"{param}.{key}")


def chunking(strategy: ChunkingStrategy | None, param: str = "chunking_strategy") -> ChunkingStrategy:
    """The strategy a file is chunked with, as OpenAI reports it: `static` with its sizes (`auto`: 800 and 400)."""
    if strategy is None or strategy.type == "auto":
        if strategy is not None and strategy.static is not None:
            raise InvalidParam("'auto' takes no 'static' sizes.", param=f"{param}.static")
        return ChunkingStrategy(type="static", static=StaticChunking())
    if strategy.type != "static":
        raise InvalidParam("type must be 'auto' or 'static'.", param=f"{param}.type")
    sizes = strategy.static
    if sizes is None:
        raise InvalidParam("A 'static' strategy needs its 'static' sizes.", param=f"{param}.static")
    if not MIN_TOKENS <= sizes.max_chunk_size_tokens <= MAX_TOKENS:
        raise InvalidParam(
            f"max_chunk_size_tokens must be between {MIN_TOKENS} and {MAX_TOKENS}.",
            param=f"{param}.static.max_chunk_size_tokens",
        )
    if not 0 <= sizes.chunk_overlap_tokens <= sizes.max_chunk_size_tokens // 2:
        raise InvalidParam(
            "chunk_overlap_tokens must be between 0 and half of max_chunk_size_tokens.",
            param=f"{param}.static.chunk_overlap_tokens",
        )
    return strategy


def _check_expiry(expires: ExpiresAfter | None) -> None:
    if expires is None:
        return
    if expires.anchor != "last_active_at":
        raise InvalidParam("expires_after.anchor must be 'last_active_at'.", param="expires_after.anchor")
    if not 1 <= expires.days <= 365:
        raise InvalidParam("expires_after.days must be between 1 and 365.", param="expires_after.days")


def _check_name(name: str | None) -> None:
    if name is not None and len(name) > MAX_NAME:
        raise InvalidParam(f"name holds at most {MAX_NAME} characters.", param="name")


async def _owned_store(service: Service, owner: str, store_id: str) -> VectorStore:
    found = await service.store.get_vector_store(owner, store_id)
    if found is None:
        raise missing_store(store_id)
    return found


async def _entries(
    service: Service, owner: str, store_id: str, wanted: Sequence[tuple[str, Attributes | None, ChunkingStrategy]]
) -> list[VectorStoreFile]:
    """The entries of files the owner has, each checked; a missing file is a 404 naming it (nothing is added)."""
    now = int(time.time())
    out = []
    for file_id, attributes, strategy in wanted:
        if await service.store.get_file(owner, file_id) is None:
            raise _missing_file(file_id)
        out.append(
            VectorStoreFile(
                id=file_id,
                vector_store_id=store_id,
                created_at=now,
                attributes=attributes,
                chunking_strategy=strategy,
            )
        )
    return out


# -- vector stores ------------------------------------------------------------------------------------------------


async def create(service: Service, owner: str, body: CreateStore) -> VectorStore:
    _check_name(body.name)
    check_metadata(body.metadata)
    _check_expiry(body.expires_after)
    strategy = chunking(body.chunking_strategy)
    file_ids = body.file_ids or []
    if len(file_ids) > BATCH_FILES_MAX:
        raise InvalidParam(f"file_ids holds at most {BATCH_FILES_MAX} files.", param="file_ids")
    now = int(time.time())
    store = VectorStore(
        id=new_id("vs"),
        created_at=now,
        name=body.name or "",
        description=body.description,
        metadata=body.metadata or {},
        file_counts=FileCounts(),
        last_active_at=now,
        expires_after=body.expires_after,
        expires_at=now + body.expires_after.days * 86400 if body.expires_after else None,
    )
    entries = await _entries(service, owner, store.id, [(file_id, None, strategy) for file_id in file_ids])
    await service.store.put_vector_store(owner, store)
    if entries:
        await service.store.add_store_files(owner, entries, None)
        service.file_search.ingestion.wake()
    return await _owned_store(service, owner, store.id)


async def get(service: Service, owner: str, store_id: str) -> VectorStore:
    return await _owned_store(service, owner, store_id)


async def update(service: Service, owner: str, store_id: str, body: UpdateStore) -> VectorStore:
    store = await _owned_store(service, owner, store_id)
    _check_name(body.name)
    check_metadata(body.metadata)
    if body.name is not None:
        store.name = body.name
    if body.metadata is not None:
        store.metadata = body.metadata
    if not isinstance(body.expires_after, msgspec.UnsetType):  # null: it no longer expires
        expires = body.expires_after
        _check_expiry(expires)
        store.expires_after = expires
        anchor = store.last_active_at or store.created_at
        store.expires_at = anchor + expires.days * 86400 if expires else None
    await service.store.put_vector_store(owner, store)
    return await _owned_store(service, owner, store_id)


async def delete(service: Service, owner: str, store_id: str) -> Deleted:
    if not await service.store.delete_vector_store(owner, store_id):
        raise missing_store(store_id)
    return Deleted(id=store_id, object="vector_store.deleted")


async def list_stores(service: Service, owner: str, after: str | None, limit: int, order: Order) -> ObjectList:
    page = await service.store.list_vector_stores(owner, after=after, limit=limit, order=order)
    return listed(list(page.data), page.has_more)


# -- a store's files ------------------------------------------------------------------------------------------------


async def add_file(service: Service, owner: str, store_id: str, body: CreateFile) -> VectorStoreFile:
    await _owned_store(service, owner, store_id)
    check_attributes(body.attributes)
    entries = await _entries(
        service, owner, store_id, [(body.file_id, body.attributes, chunking(body.chunking_strategy))]
    )
    await service.store.add_store_files(owner, entries, None)
    service.file_search.ingestion.wake()
    return entries[0]


async def get_file(service: Service, owner: str, store_id: str, file_id: str) -> VectorStoreFile:
    await _owned_store(service, owner, store_id)
    found = await service.store.get_store_file(owner, store_id, file_id)
    if found is None:
        raise _missing_file(file_id)
    return found


async def update_file(
    service: Service, owner: str, store_id: str, file_id: str, attributes: Attributes | None
) -> VectorStoreFile:
    await _owned_store(service, owner, store_id)
    check_attributes(attributes)
    found = await service.store.update_store_file(owner, store_id, file_id, attributes)
    if found is None:
        raise _missing_file(file_id)
    return found


async def remove_file(service: Service, owner: str, store_id: str, file_id: str) -> Deleted:
    await _owned_store(service, owner, store_id)
    if not await service.store.delete_store_file(owner, store_id, file_id):
        raise _missing_file(file_id)
    return Deleted(id=file_id, object="vector_store.file.deleted")


FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


async def list_files(
    service: Service,
    owner: str,
    store_id: str,
    page: tuple[str | None, int, Order],
    status: str | None,
    batch_id: str | None = None,
) -> ObjectList:
    await _owned_store(service, owner, store_id)
    if status is not None and status not in FILE_STATUSES:
        raise InvalidParam(f"filter must be one of {', '.join(FILE_STATUSES)}.", param="filter")
    after, limit, order = page
    found = await service.store.list_store_files(
        owner, store_id, after=after, limit=limit, order=order, status=status, batch_id=batch_id
    )
    return listed(list(found.data), found.has_more)


async def file_content(service: Service, owner: str, store_id: str, file_id: str) -> FileContentPage:
    """The file's text as ingestion read it, put back together from its chunks (their overlaps taken once)."""
    entry = await get_file(service, owner, store_id, file_id)
    if entry.status != "completed":
        return FileContentPage(data=[])
    parts: list[str] = []
    covered = 0
    for start, end, text in await service.store.file_text(store_id, file_id):
        if end <= covered:
            continue
        if start > covered and parts:
            parts.append("\n")
        parts.append(text[max(0, covered - start) :])
        covered = end
    return FileContentPage(data=[TextContent(text="".join(parts))] if parts else [])


# -- batches --------------------------------------------------------------------------------------------------------


async def create_batch(service: Service, owner: str, store_id: str, body: CreateBatch) -> VectorStoreFileBatch:
    await _owned_store(service, owner, store_id)
    if (body.file_ids is None) == (body.files is None):
        raise InvalidParam("Give either file_ids or files (one of them).", param="file_ids")
    check_attributes(body.attributes)
    strategy = chunking(body.chunking_strategy)
    if body.files is not None:
        wanted = []
        for n, entry in enumerate(body.files):
            check_attributes(entry.attributes, f"files[{n}].attributes")
            own = chunking(entry.chunking_strategy, f"files[{n}].chunking_strategy")
            wanted.append((entry.file_id, entry.attributes, own if entry.chunking_strategy else strategy))
        param = "files"
    else:
        wanted = [(file_id, body.attributes, strategy) for file_id in body.file_ids or []]
        param = "file_ids"
    if not wanted or len(wanted) > BATCH_FILES_MAX:
        raise InvalidParam(f"{param} holds 1 to {BATCH_FILES_MAX} files.", param=param)
    if len({file_id for file_id, _, _ in wanted}) != len(wanted):
        raise InvalidParam(f"{param} names a file twice.", param=param)
    entries = await _entries(service, owner, store_id, wanted)
    batch_id = new_id("vsfb")
    await service.store.add_store_files(owner, entries, batch_id)
    service.file_search.ingestion.wake()
    return await get_batch(service, owner, store_id, batch_id)


async def get_batch(service: Service, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch:
    found = await service.store.get_batch(owner, store_id, batch_id)
    if found is None:
        raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")
    return found


async def cancel_batch(service: Service, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch:
    found = await service.store.cancel_batch(owner, store_id, batch_id)
    if found is None:
        raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id", code="batch_not_found")
    return found


# -- search ---------------------------------------------------------------------------------------------------------


def search_options(body: Search) -> SearchOptions:
    """A search's options checked, a 400 naming the field (the file_search tool's: tools/file_search.py)."""
    if not 1 <= body.max_num_results <= MAX_RESULTS:
        raise InvalidParam(f"max_num_results must be between 1 and {MAX_RESULTS}.", param="max_num_results")
    allow = compile_filter(body.filters, "filters") if body.filters is not None else None
    ranker, threshold, weights = ranking(body.ranking_options, "ranking_options", RANKERS)
    return SearchOptions(allow, body.max_num_results, ranker, threshold, weights)


def _queries(query: str | list[str]) -> list[str]:
    queries = [query] if isinstance(query, str) else list(query)
    if not queries or len(queries) > MAX_QUERIES:
        raise InvalidParam(f"query must be a string or a list of 1 to {MAX_QUERIES} strings.", param="query")
    if any(not text.strip() or len(text) > MAX_QUERY_CHARS for text in queries):
        raise InvalidParam(f"Each query needs 1 to {MAX_QUERY_CHARS} characters.", param="query")
    return queries


async def search(service: Service, owner: str, store_id: str, body: Search) -> SearchPage:
    queries = _queries(body.query)
    options = search_options(body)
    if body.rewrite_query:
        # No model rewrites queries here: a rewritten query is its keywords (the words a search weighs).
        queries = [" ".join(words(query)) or query for query in queries]
    results = await service.file_search.search(owner, [store_id], queries, options, param="vector_store_id")
    return SearchPage(search_query=queries, data=results)
