"""What a store keeps for the Vector Stores API and file_search (issue 39): vector stores, the files added to them
(each with its ingestion's status and lease), batches, and the chunks ingestion made: each chunk's text, vector and
lexical terms, which every replica reads into its search index once (pipeline/filesearch/index.py).

Owner-scoped like responses: another owner's vector store reads as missing. A file's chunks count only once its
status is `completed`: ingestion writes them first and completes the file after, so a search never sees half a file.
Ingestion is leased (`claim_file`): a replica that dies mid-file leaves a lease that runs out, and the next claim
takes the file again (up to `MAX_ATTEMPTS`), so what was `in_progress` at a restart resumes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

from hotloop.errors import HotloopError
from hotloop.wire.vector_stores import (
    Attributes,
    FileCounts,
    FileStatus,
    LastError,
    StaticChunking,
    VectorStore,
    VectorStoreFile,
    VectorStoreFileBatch,
)

LEASE_S = 60.0  # an ingestion's claim on a file, renewed while it works
MAX_ATTEMPTS = 3  # claims of one file (a replica died each time) before it is `failed`
Order = Literal["asc", "desc"]


class VectorStoresNotKept(HotloopError):
    """501: the Redis store keeps no files, so no vector stores either."""

    status = 501
    type = "server_error"
    code = "vector_stores_not_supported"

    def __init__(self) -> None:
        super().__init__(
            "This server's store keeps no vector stores: file_search needs the SQLite or PostgreSQL store (store_url)."
        )


class Page(msgspec.Struct):
    data: list[VectorStore] | list[VectorStoreFile]
    has_more: bool


class Claim(msgspec.Struct, frozen=True):
    """One file's ingestion, claimed: what the worker needs to read and chunk it, and the lease it holds."""

    owner: str
    vector_store_id: str
    file_id: str
    lease: str
    attempts: int
    max_tokens: int
    overlap: int

    @classmethod
    def of(cls, owner: str, file: VectorStoreFile, lease: str, attempts: int) -> Claim:
        """The claim on `file`, with the chunk sizes it was added with (`auto`'s when none)."""
        sizes = (file.chunking_strategy.static if file.chunking_strategy else None) or StaticChunking()
        tokens, overlap = sizes.max_chunk_size_tokens, sizes.chunk_overlap_tokens
        return cls(owner, file.vector_store_id, file.id, lease, attempts, tokens, overlap)


class ChunkRow(msgspec.Struct, array_like=True, frozen=True):
    seq: int
    start: int  # character offsets in the file's extracted text
    end: int
    text: str
    vector: bytes  # float32, little-endian, the embedder's dims
    terms: bytes  # its lexical terms (filesearch/lexical.py), uint32 little-endian


class StoredFile(msgspec.Struct, frozen=True):
    """A completed file as the search index reads it: its chunks' ids come with `chunk_vectors`."""

    file_id: str
    filename: str
    attributes: Attributes | None
    generation: str  # the lease that completed it: a file ingested again is a different generation
    model: str = ""  # the embedding model of its vectors


def with_counts(store: VectorStore, counts: FileCounts, usage_bytes: int, now: int) -> VectorStore:
    """A stored vector store with what is computed on reading: its files' counts, their bytes, its status."""
    store.file_counts, store.usage_bytes = counts, usage_bytes
    expired = store.expires_at is not None and store.expires_at <= now
    store.status = "expired" if expired else "in_progress" if counts.in_progress else "completed"
    return store


def counted(rows: Sequence[tuple[str, int]]) -> FileCounts:
    """File counts from (status, count) rows."""
    found = FileCounts()
    for status, n in rows:
        setattr(found, status, n)
        found.total += n
    return found


def batch_of(
    batch_id: str, store_id: str, created_at: int, cancelled: bool, counts: FileCounts
) -> VectorStoreFileBatch:
    status: FileStatus = "in_progress" if counts.in_progress else "cancelled" if cancelled else "completed"
    return VectorStoreFileBatch(
        id=batch_id, vector_store_id=store_id, created_at=created_at, file_counts=counts, status=status
    )


def interrupted(attempts: int) -> LastError:
    return LastError(
        code="server_error", message=f"Ingestion of this file was interrupted {attempts} times; add it again to retry."
    )


class VectorStoreStore(Protocol):
    async def put_vector_store(self, owner: str, store: VectorStore) -> None:
        """Insert or replace the store's own fields (its counts and status are computed on reading)."""
        ...

    async def get_vector_store(self, owner: str, store_id: str, counted: bool = True) -> VectorStore | None:
        """`counted` false: without its files' counts and bytes (zero; its status says only whether it expired),
        one indexed read, as a search needs it."""
        ...

    async def list_vector_stores(self, owner: str, *, after: str | None, limit: int, order: Order) -> Page: ...

    async def delete_vector_store(self, owner: str, store_id: str) -> bool:
        """With its files' entries, batches and chunks (the files themselves stay)."""
        ...

    async def touch_vector_store(self, owner: str, store_id: str, now: int) -> None:
        """A search used it: `last_active_at`, and `expires_at` moved with it."""
        ...

    async def add_store_files(self, owner: str, files: Sequence[VectorStoreFile], batch_id: str | None) -> None:
        """Add (or add again, which ingests again) files as `in_progress`; a batch's row first when `batch_id`."""
        ...

    async def get_store_file(self, owner: str, store_id: str, file_id: str) -> VectorStoreFile | None: ...

    async def list_store_files(
        self,
        owner: str,
        store_id: str,
        *,
        after: str | None,
        limit: int,
        order: Order,
        status: str | None,
        batch_id: str | None,
    ) -> Page: ...

    async def update_store_file(
        self, owner: str, store_id: str, file_id: str, attributes: Attributes | None
    ) -> VectorStoreFile | None: ...

    async def delete_store_file(self, owner: str, store_id: str, file_id: str) -> bool:
        """The entry and its chunks; the file stays."""
        ...

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None: ...

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        """Its files still `in_progress` become `cancelled` (a worker on one finds that and writes nothing)."""
        ...

    async def file_counts(self, store_id: str) -> FileCounts: ...

    # -- ingestion (filesearch/ingest.py) ---------------------------------------------------------------------------

    async def claim_file(self, lease: str, now: float) -> Claim | None:
        """Lease one `in_progress` file nobody holds (or whose holder's lease ran out), or None. A file claimed
        `MAX_ATTEMPTS` times already is failed instead."""
        ...

    async def renew_lease(self, claim: Claim, now: float) -> bool:
        """False when the claim is no longer the file's (cancelled, removed, taken over)."""
        ...

    async def save_chunks(self, claim: Claim, rows: Sequence[ChunkRow]) -> bool:
        """Part of a file's chunks (written in parts, so no write holds the store long); False when the claim is
        no longer the file's."""
        ...

    async def complete_file(self, claim: Claim, usage_bytes: int, model: str) -> bool:
        """The file's chunks count from now on, their vectors `model`'s; False when the claim is no longer the
        file's (its chunks go)."""
        ...

    async def fail_file(self, claim: Claim, error: LastError) -> None: ...

    # -- search (filesearch/index.py) -------------------------------------------------------------------------------

    async def index_version(self, store_id: str) -> int | None:
        """A number that changes whenever the store's searchable chunks or attributes do; None: no such store."""
        ...

    async def stored_files(self, store_id: str) -> list[StoredFile]:
        """The store's completed files."""
        ...

    async def chunk_vectors(self, store_id: str, file_id: str) -> tuple[list[int], bytes, list[bytes]]:
        """A completed file's chunk ids, their vectors (concatenated) and their terms, in the same order."""
        ...

    async def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]: ...

    async def file_text(self, store_id: str, file_id: str) -> list[tuple[int, int, str]]:
        """A file's chunks as (start, end, text), in order: its extracted text, read back."""
        ...
