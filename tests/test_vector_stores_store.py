"""The vector stores' store contract (stores/vector_stores.py): SQLite and PostgreSQL keep vector stores, their
files' ingestion state and their chunks the same way: owner-scoped; chunks that count only once their file is
completed; leases that a dead worker's replacement takes over, up to MAX_ATTEMPTS; a cancelled batch whose worker
writes nothing more; a deleted file gone from every store; the Redis store keeps none and says so."""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from hotloop.config import Settings
from hotloop.filesearch.lexical import terms
from hotloop.stores.base import Store
from hotloop.stores.url import open_store
from hotloop.stores.vector_stores import LEASE_S, MAX_ATTEMPTS, ChunkRow, Claim, VectorStoresNotKept
from hotloop.wire.files import FileObject
from hotloop.wire.vector_stores import FileCounts, LastError, VectorStore, VectorStoreFile
from store_support import drop_namespace, namespace, opened_store, store_url

A, B = "owner-a", "owner-b"


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


async def _vector_store(store: Store, owner: str, store_id: str, created_at: int = 0) -> VectorStore:
    made = VectorStore(id=store_id, created_at=created_at or int(time.time()), name=store_id, file_counts=FileCounts())
    await store.put_vector_store(owner, made)
    return made


async def _file(store: Store, owner: str, file_id: str) -> None:
    file = FileObject(id=file_id, bytes=5, created_at=int(time.time()), filename=f"{file_id}.txt", purpose="assistants")
    await store.put_file(owner, file, io.BytesIO(b"hello"))


def _entry(store_id: str, file_id: str) -> VectorStoreFile:
    return VectorStoreFile(id=file_id, vector_store_id=store_id, created_at=int(time.time()))


def _rows(n: int, words: str) -> list[ChunkRow]:
    vectors = np.eye(n, 4, dtype="<f4")
    return [
        ChunkRow(seq, seq * 10, seq * 10 + 9, f"{words} part {seq}", vectors[seq].tobytes(), terms(words).tobytes())
        for seq in range(n)
    ]


async def _ingested(store: Store, owner: str, store_id: str, file_id: str, words: str) -> Claim:
    await _file(store, owner, file_id)
    await store.add_store_files(owner, [_entry(store_id, file_id)], None)
    claim = await store.claim_file("lease-" + file_id, time.time())
    assert claim is not None and claim.file_id == file_id
    assert await store.save_chunks(claim, _rows(2, words))
    assert await store.complete_file(claim, 123, "m")
    return claim


async def test_vector_stores_are_owner_scoped_and_page(store: Store) -> None:
    now = int(time.time())
    for n in range(3):
        await _vector_store(store, A, f"vs_{n}", now + n)
    assert await store.get_vector_store(B, "vs_0") is None
    assert not await store.delete_vector_store(B, "vs_0")
    page = await store.list_vector_stores(A, after=None, limit=2, order="desc")
    assert [found.id for found in page.data] == ["vs_2", "vs_1"] and page.has_more
    page = await store.list_vector_stores(A, after="vs_1", limit=2, order="desc")
    assert [found.id for found in page.data] == ["vs_0"] and not page.has_more
    assert (await store.list_vector_stores(B, after=None, limit=10, order="asc")).data == []
    assert await store.delete_vector_store(A, "vs_1")
    assert await store.get_vector_store(A, "vs_1") is None


async def test_a_files_chunks_count_once_it_is_completed(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _file(store, A, "file_1")
    await store.add_store_files(A, [_entry("vs_a", "file_1")], None)
    found = await store.get_vector_store(A, "vs_a")
    assert found is not None and found.status == "in_progress" and found.file_counts.in_progress == 1
    before = await store.index_version("vs_a")
    claim = await store.claim_file("lease-1", time.time())
    assert claim is not None and (claim.owner, claim.attempts, claim.max_tokens, claim.overlap) == (A, 1, 800, 400)
    assert await store.claim_file("lease-2", time.time()) is None  # held
    assert await store.save_chunks(claim, _rows(3, "alpha beta"))
    assert await store.stored_files("vs_a") == []  # not completed yet
    assert await store.complete_file(claim, 4242, "m")
    assert await store.index_version("vs_a") != before
    found = await store.get_vector_store(A, "vs_a")
    assert found is not None and found.status == "completed" and found.usage_bytes == 4242
    assert found.file_counts.completed == found.file_counts.total == 1
    [stored] = await store.stored_files("vs_a")
    made = (stored.file_id, stored.filename, stored.generation, stored.model)
    assert made == ("file_1", "file_1.txt", "lease-1", "m")
    ids, blob, found = await store.chunk_vectors("vs_a", "file_1")
    assert len(ids) == 3 and np.frombuffer(blob, "<f4").reshape(3, 4)[1].tolist() == [0, 1, 0, 0]
    assert [np.frombuffer(one, "<u4").tolist() for one in found] == [terms("alpha beta").tolist()] * 3
    assert (await store.chunk_texts(ids[:1]))[ids[0]] == "alpha beta part 0"
    assert [start for start, _, _ in await store.file_text("vs_a", "file_1")] == [0, 10, 20]


async def test_a_lapsed_lease_is_taken_over_and_the_old_worker_writes_nothing(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _file(store, A, "file_1")
    await store.add_store_files(A, [_entry("vs_a", "file_1")], None)
    first = await store.claim_file("lease-1", time.time())
    assert first is not None and await store.save_chunks(first, _rows(1, "old"))
    later = time.time() + LEASE_S + 1  # the first worker died: its lease runs out
    second = await store.claim_file("lease-2", later)
    assert second is not None and second.attempts == 2
    assert not await store.save_chunks(first, _rows(1, "old"))
    assert not await store.renew_lease(first, later)
    assert await store.save_chunks(second, _rows(2, "new"))
    assert not await store.complete_file(first, 1, "m")
    assert await store.complete_file(second, 2, "m")
    ids, _, _ = await store.chunk_vectors("vs_a", "file_1")
    assert len(ids) == 2  # the first attempt's chunk went when the second claimed the file


async def test_a_file_interrupted_too_often_fails(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _file(store, A, "file_1")
    await store.add_store_files(A, [_entry("vs_a", "file_1")], None)
    now = time.time()
    for attempt in range(MAX_ATTEMPTS):
        claim = await store.claim_file(f"lease-{attempt}", now)
        assert claim is not None and claim.attempts == attempt + 1
        now += LEASE_S + 1
    assert await store.claim_file("lease-last", now) is None
    entry = await store.get_store_file(A, "vs_a", "file_1")
    assert entry is not None and entry.status == "failed" and entry.last_error is not None
    assert entry.last_error.code == "server_error"


async def test_a_cancelled_batch_stops_its_files(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    for file_id in ("file_1", "file_2"):
        await _file(store, A, file_id)
    await store.add_store_files(A, [_entry("vs_a", "file_1"), _entry("vs_a", "file_2")], "vsfb_1")
    claim = await store.claim_file("lease-1", time.time())
    assert claim is not None
    assert await store.cancel_batch(B, "vs_a", "vsfb_1") is None
    batch = await store.cancel_batch(A, "vs_a", "vsfb_1")
    assert batch is not None and batch.status == "cancelled" and batch.file_counts.cancelled == 2
    assert not await store.save_chunks(claim, _rows(1, "late"))
    assert not await store.complete_file(claim, 1, "m")
    assert await store.claim_file("lease-2", time.time()) is None
    listed = await store.list_store_files(
        A, "vs_a", after=None, limit=10, order="asc", status="cancelled", batch_id="vsfb_1"
    )
    assert {entry.id for entry in listed.data} == {"file_1", "file_2"}


async def test_a_failed_file_keeps_its_reason(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _file(store, A, "file_1")
    await store.add_store_files(A, [_entry("vs_a", "file_1")], None)
    claim = await store.claim_file("lease-1", time.time())
    assert claim is not None
    await store.fail_file(claim, LastError(code="unsupported_file", message="no text"))
    entry = await store.get_store_file(A, "vs_a", "file_1")
    assert entry is not None and entry.status == "failed"
    assert entry.last_error == LastError(code="unsupported_file", message="no text")


async def test_deleting_a_file_removes_it_from_every_store(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _ingested(store, A, "vs_a", "file_1", "gamma")
    version = await store.index_version("vs_a")
    assert await store.delete_file(A, "file_1")
    assert await store.get_store_file(A, "vs_a", "file_1") is None
    assert await store.stored_files("vs_a") == []
    assert await store.chunk_vectors("vs_a", "file_1") == ([], b"", [])
    assert await store.index_version("vs_a") != version


async def test_attributes_change_the_index_version(store: Store) -> None:
    await _vector_store(store, A, "vs_a")
    await _ingested(store, A, "vs_a", "file_1", "delta")
    version = await store.index_version("vs_a")
    assert await store.update_store_file(B, "vs_a", "file_1", {"k": 1}) is None
    updated = await store.update_store_file(A, "vs_a", "file_1", {"k": 1, "tag": "x"})
    assert updated is not None and updated.attributes == {"k": 1, "tag": "x"}
    assert await store.index_version("vs_a") != version
    [stored] = await store.stored_files("vs_a")
    assert stored.attributes == {"k": 1, "tag": "x"}
    assert await store.delete_store_file(A, "vs_a", "file_1")
    assert await store.stored_files("vs_a") == []
    assert await store.get_file(A, "file_1") is not None  # the file itself stays


async def test_the_redis_store_keeps_no_vector_stores(tmp_path: Path) -> None:
    ns = namespace()
    opened = open_store(Settings(store_url=store_url("redis", ns, tmp_path), data_dir=str(tmp_path)))
    try:
        with pytest.raises(VectorStoresNotKept):
            await opened.get_vector_store(A, "vs_1")
        assert await opened.claim_file("lease", time.time()) is None
    finally:
        await opened.close()
        await drop_namespace("redis", ns)
