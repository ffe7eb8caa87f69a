"""The Files API's store contract (stores/files.py): SQLite and PostgreSQL keep a file and its bytes the same way,
owner-scoped, readable whole or not at all, expired files gone; the Redis store keeps none and says so."""

from __future__ import annotations

import io
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hotloop.config import Settings
from hotloop.errors import ServerError
from hotloop.stores.base import Store
from hotloop.stores.files import CHUNK_BYTES, FilesNotKept
from hotloop.stores.url import open_store
from hotloop.wire.files import FileObject
from store_support import drop_namespace, namespace, opened_store, store_url

A, B = "owner-a", "owner-b"


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


def _file(file_id: str, size: int, *, created_at: int | None = None, expires_at: int | None = None) -> FileObject:
    return FileObject(
        id=file_id,
        bytes=size,
        created_at=created_at if created_at is not None else int(time.time()),
        filename=f"{file_id}.txt",
        purpose="assistants",
        expires_at=expires_at,
    )


async def _read(store: Store, owner: str, file: FileObject) -> bytes:
    return b"".join([chunk async for chunk in store.file_content(owner, file)])


async def test_a_file_round_trips_in_chunks_for_its_owner_only(store: Store) -> None:
    data = os.urandom(2 * CHUNK_BYTES + 12345)  # three chunks, the last short
    file = _file("file_big", len(data))
    await store.put_file(A, file, io.BytesIO(data))
    assert await store.get_file(A, file.id) == file
    assert await _read(store, A, file) == data
    assert await store.get_file(B, file.id) is None
    assert (await store.list_files(B, after=None, limit=10, order="desc", purpose=None)).files == []
    assert not await store.delete_file(B, file.id)
    assert await store.delete_file(A, file.id)
    assert await store.get_file(A, file.id) is None
    assert await _read(store, A, file) == b""  # its bytes went with it
    assert not await store.delete_file(A, file.id)


async def test_pages_by_creation_time_with_a_purpose_filter(store: Store) -> None:
    for n in range(5):
        await store.put_file(A, _file(f"file_{n}", 1, created_at=1_700_000_000 + n), io.BytesIO(b"x"))
    newest = await store.list_files(A, after=None, limit=2, order="desc", purpose=None)
    assert [f.id for f in newest.files] == ["file_4", "file_3"] and newest.has_more
    rest = await store.list_files(A, after="file_3", limit=10, order="desc", purpose=None)
    assert [f.id for f in rest.files] == ["file_2", "file_1", "file_0"] and not rest.has_more
    oldest = await store.list_files(A, after="file_0", limit=2, order="asc", purpose=None)
    assert [f.id for f in oldest.files] == ["file_1", "file_2"]
    assert (await store.list_files(A, after="file_nope", limit=2, order="asc", purpose=None)).files == []
    assert (await store.list_files(A, after=None, limit=9, order="asc", purpose="batch")).files == []


async def test_an_expired_file_reads_as_gone(store: Store) -> None:
    past = int(time.time()) - 10
    await store.put_file(A, _file("file_old", 1, created_at=past - 3600, expires_at=past), io.BytesIO(b"x"))
    await store.put_file(A, _file("file_new", 1, expires_at=past + 7200), io.BytesIO(b"y"))
    assert await store.get_file(A, "file_old") is None
    assert [f.id for f in (await store.list_files(A, after=None, limit=9, order="asc", purpose=None)).files] == [
        "file_new"
    ]


async def test_the_sweep_deletes_expired_files_with_their_bytes(store: Store) -> None:
    now = int(time.time())
    expired = _file("file_gone", 1, created_at=now - 7200, expires_at=now - 1)
    await store.put_file(A, expired, io.BytesIO(b"x"))
    await store.put_file(A, _file("file_kept", 1, expires_at=now + 3600), io.BytesIO(b"y"))
    await store.put_file(B, _file("file_forever", 1), io.BytesIO(b"z"))
    assert await store.expire_files(now, 10) == 1
    assert await store.expire_files(now, 10) == 0
    assert await _read(store, A, expired) == b""  # its bytes went with it
    assert await store.get_file(A, "file_kept") is not None and await store.get_file(B, "file_forever") is not None


async def test_a_failed_upload_leaves_nothing(store: Store) -> None:
    class Broken(io.RawIOBase):
        def __init__(self) -> None:
            self.calls = 0

        def read(self, size: int = -1) -> bytes:
            self.calls += 1
            if self.calls > 2:
                raise OSError("the spooled upload vanished")
            return b"z" * CHUNK_BYTES

    with pytest.raises(ServerError):  # the server's fault: not a 503 that would mark the store down
        await store.put_file(A, _file("file_broken", 3 * CHUNK_BYTES), Broken())  # type: ignore[arg-type]
    assert await store.get_file(A, "file_broken") is None
    assert await _read(store, A, _file("file_broken", 0)) == b""  # no chunk left behind


async def test_the_redis_store_keeps_no_files(tmp_path: Path) -> None:
    ns = namespace()
    redis = open_store(Settings(store_url=store_url("redis", ns, tmp_path), data_dir=str(tmp_path)))
    try:
        with pytest.raises(FilesNotKept) as refused:
            await redis.put_file(A, _file("file_r", 1), io.BytesIO(b"x"))
        assert refused.value.status == 501 and refused.value.code == "files_not_supported"
    finally:
        await redis.close()
        await drop_namespace("redis", ns)
