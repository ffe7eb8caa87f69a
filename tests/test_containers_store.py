"""The containers' store contract (stores/containers.py): SQLite and PostgreSQL keep containers and their files the
same way: owner-scoped; at most so many per owner; a file readable whole or not at all, its bytes in the Files API's
chunks (copied there in the store for a Files API file); a path taken by a file, a directory of it or one beneath
it; a replaced file keeps its id; idle containers expire with their files and their bytes; the Redis store keeps
none and says so. Every time is passed in, so the tests move it."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO, cast

import msgspec
import pytest

from hotloop.config import Settings
from hotloop.errors import ServerError
from hotloop.stores.base import Store
from hotloop.stores.containers import ContainerSkill, ContainersNotKept
from hotloop.stores.files import CHUNK_BYTES, chunks_of
from hotloop.stores.url import open_store
from hotloop.wire.containers import Container, ContainerFile, ExpiresAfter
from hotloop.wire.files import FileObject
from store_support import chunk_rows, drop_namespace, namespace, opened_store, store_url

A, B = "owner-a", "owner-b"
NOW = 1_800_000_000
IDLE_S = 20 * 60


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


async def _container(store: Store, owner: str, container_id: str, *, at: int = NOW, name: str = "c") -> Container:
    made = Container(
        id=container_id,
        created_at=at,
        last_active_at=at,
        name=name,
        expires_after=ExpiresAfter(anchor="last_active_at", minutes=IDLE_S // 60),
    )
    assert await store.put_container(owner, made, at + IDLE_S, 100)
    return made


def _file(container_id: str, path: str, file_id: str = "", source: str = "user") -> ContainerFile:
    return ContainerFile(
        id=file_id or f"cfile_{abs(hash(path))}",
        container_id=container_id,
        created_at=NOW,
        bytes=0,
        path=f"/mnt/data/{path}",
        source=source,
    )


async def _put(store: Store, owner: str, file: ContainerFile, data: bytes, *, replace: bool = False) -> str:
    placed = await store.put_container_file(owner, file, chunks_of(data), now=NOW + 1, max_files=3, replace=replace)
    return placed.outcome


async def _read(store: Store, owner: str, container_id: str, file_id: str) -> bytes:
    stored = await store.get_container_file(owner, container_id, file_id, NOW + 1)
    assert stored is not None
    return b"".join([chunk async for chunk in store.container_file_content(stored.blob)])


async def test_containers_are_owner_scoped_bounded_and_page(store: Store) -> None:
    for n in range(3):
        await _container(store, A, f"cntr_{n}", at=NOW + n, name="even" if n % 2 == 0 else "odd")
    assert await store.get_container(B, "cntr_0", NOW) is None
    assert not await store.delete_container(B, "cntr_0", NOW)
    found = await store.get_container(A, "cntr_1", NOW + 5)
    assert found is not None and found.name == "odd" and found.last_active_at == NOW + 1
    page = await store.list_containers(A, NOW + 5, after=None, limit=2, order="desc", name=None)
    assert [c.id for c in page.data] == ["cntr_2", "cntr_1"] and page.has_more
    page = await store.list_containers(A, NOW + 5, after="cntr_1", limit=2, order="desc", name=None)
    assert [c.id for c in page.data] == ["cntr_0"] and not page.has_more
    evens = await store.list_containers(A, NOW + 5, after=None, limit=9, order="asc", name="even")
    assert [c.id for c in evens.data] == ["cntr_0", "cntr_2"]
    assert (await store.list_containers(A, NOW, after="cntr_nope", limit=9, order="asc", name=None)).data == []
    assert (await store.list_containers(B, NOW, after=None, limit=9, order="asc", name=None)).data == []
    # The owner's bound counts its live containers only.
    extra = Container(
        id="cntr_x",
        created_at=NOW,
        last_active_at=NOW,
        name="x",
        expires_after=ExpiresAfter(anchor="last_active_at", minutes=1),
    )
    assert not await store.put_container(A, extra, NOW + 60, 3)
    assert await store.put_container(B, extra, NOW + 60, 3)  # another owner's count
    assert await store.delete_container(A, "cntr_1", NOW)
    assert await store.get_container(A, "cntr_1", NOW) is None


async def test_a_file_round_trips_in_chunks_for_its_owner_only(store: Store) -> None:
    await _container(store, A, "cntr_a")
    data = os.urandom(2 * CHUNK_BYTES + 99)
    file = _file("cntr_a", "big.bin", "cfile_big")
    assert await _put(store, A, file, data) == "added"
    assert await _read(store, A, "cntr_a", "cfile_big") == data
    stored = await store.get_container_file(A, "cntr_a", "cfile_big", NOW)
    assert stored is not None and stored.file.bytes == len(data) and stored.file.path == "/mnt/data/big.bin"
    assert await store.get_container_file(B, "cntr_a", "cfile_big", NOW) is None
    assert await store.list_container_files(B, "cntr_a", NOW, after=None, limit=9, order="asc") is None
    assert not await store.delete_container_file(B, "cntr_a", "cfile_big", NOW)
    # Another owner cannot put a file in it either.
    assert await _put(store, B, _file("cntr_a", "intruder.txt"), b"x") == "missing"
    touched = await store.get_container(A, "cntr_a", NOW)
    assert touched is not None and touched.last_active_at == NOW + 1  # the put moved it
    assert await store.delete_container_file(A, "cntr_a", "cfile_big", NOW + 2)
    assert await store.get_container_file(A, "cntr_a", "cfile_big", NOW + 2) is None
    assert await chunk_rows(store) == 0  # its bytes went with it


async def test_paths_form_a_tree_and_a_container_holds_so_many_files(store: Store) -> None:
    await _container(store, A, "cntr_a")
    assert await _put(store, A, _file("cntr_a", "a/b.txt", "cfile_1"), b"1") == "added"
    assert await _put(store, A, _file("cntr_a", "a/b.txt", "cfile_2"), b"2") == "taken"  # the same path
    assert await _put(store, A, _file("cntr_a", "a", "cfile_3"), b"3") == "taken"  # a directory of a file
    assert await _put(store, A, _file("cntr_a", "a/b.txt/c", "cfile_4"), b"4") == "taken"  # beneath a file
    assert await _put(store, A, _file("cntr_a", "a/b.txt/c", "cfile_4"), b"4", replace=True) == "taken"
    assert await _put(store, A, _file("cntr_a", "a/bc.txt", "cfile_5"), b"5") == "added"  # a prefix, not a dir
    assert await _put(store, A, _file("cntr_a", "z.txt", "cfile_6"), b"6") == "added"
    assert await _put(store, A, _file("cntr_a", "full.txt", "cfile_7"), b"7") == "full"  # max_files 3
    listed = await store.list_container_files(A, "cntr_a", NOW, after=None, limit=9, order="asc")
    assert listed is not None and {f.id for f in listed.data} == {"cfile_1", "cfile_5", "cfile_6"}
    assert await chunk_rows(store) == 3  # nothing refused left a chunk behind


async def test_a_replaced_file_keeps_its_id_and_gets_the_new_bytes(store: Store) -> None:
    await _container(store, A, "cntr_a")
    assert await _put(store, A, _file("cntr_a", "out.csv", "cfile_1", source="assistant"), b"old") == "added"
    placed = await store.put_container_file(
        A, _file("cntr_a", "out.csv", "cfile_other"), chunks_of(b"newer"), now=NOW + 9, max_files=3, replace=True
    )
    assert placed.outcome == "replaced" and placed.file is not None
    assert (placed.file.id, placed.file.bytes, placed.file.source) == ("cfile_1", 5, "assistant")
    assert await _read(store, A, "cntr_a", "cfile_1") == b"newer"
    assert await chunk_rows(store) == 1  # the old bytes went
    touched = await store.get_container(A, "cntr_a", NOW + 9)
    assert touched is not None and touched.last_active_at == NOW + 9


async def test_a_files_api_file_is_copied_in_the_store(store: Store) -> None:
    await _container(store, A, "cntr_a")
    data = os.urandom(CHUNK_BYTES + 5)
    source = FileObject(id="file_src", bytes=len(data), created_at=NOW, filename="src.bin", purpose="user_data")
    await store.put_file(A, source, io.BytesIO(data))
    placed = await store.put_container_file(
        A, _file("cntr_a", "src.bin", "cfile_copy"), source, now=NOW, max_files=3, replace=False
    )
    assert placed.outcome == "added" and placed.file is not None and placed.file.bytes == len(data)
    assert await store.delete_file(A, "file_src")  # the copy is the container's own
    assert await _read(store, A, "cntr_a", "cfile_copy") == data
    gone = await store.put_container_file(
        A, _file("cntr_a", "late.bin", "cfile_late"), source, now=NOW, max_files=3, replace=False
    )
    assert gone.outcome == "gone"
    assert await chunk_rows(store) == 2  # the copy's two chunks, nothing of the refused one


async def test_a_failed_put_leaves_nothing(store: Store) -> None:
    await _container(store, A, "cntr_a")

    class Broken(io.RawIOBase):
        def __init__(self) -> None:
            self.calls = 0

        def read(self, size: int = -1) -> bytes:
            self.calls += 1
            if self.calls > 1:
                raise OSError("the code's file vanished")
            return b"z" * CHUNK_BYTES

    with pytest.raises(ServerError):  # the server's fault: not a 503 that would mark the store down
        await store.put_container_file(
            A,
            _file("cntr_a", "x.bin", "cfile_x"),
            chunks_of(cast(BinaryIO, Broken())),
            now=NOW,
            max_files=3,
            replace=False,
        )
    assert await store.get_container_file(A, "cntr_a", "cfile_x", NOW) is None
    assert await chunk_rows(store) == 0


async def test_idle_containers_expire_with_their_files(store: Store) -> None:
    await _container(store, A, "cntr_idle")
    await _container(store, A, "cntr_busy")
    await _container(store, B, "cntr_other", at=NOW + 600)
    assert await _put(store, A, _file("cntr_idle", "a.txt", "cfile_a"), b"a" * 10) == "added"
    assert await store.touch_container(A, "cntr_busy", NOW + 300)
    assert not await store.touch_container(B, "cntr_busy", NOW + 300)
    later = NOW + IDLE_S + 100  # past the idle one's expiry (its put moved it a second), before the busy one's
    assert await store.get_container(A, "cntr_idle", later) is None  # gone at once, before any sweep
    assert not await store.touch_container(A, "cntr_idle", later)
    assert await store.live_containers(["cntr_idle", "cntr_busy", "cntr_nope"], later) == {"cntr_busy"}
    assert await store.expire_containers(later, 10) == ["cntr_idle"]
    assert await store.expire_containers(later, 10) == []
    assert await chunk_rows(store) == 0
    busy = await store.get_container(A, "cntr_busy", later)
    assert busy is not None and busy.last_active_at == NOW + 300
    assert sorted(await store.expire_containers(NOW + 10 * IDLE_S, 10)) == ["cntr_busy", "cntr_other"]


async def test_a_container_keeps_its_skills_zips_until_it_goes(store: Store) -> None:
    """Its skills go in with it, in order, each zip in chunks (one larger than a chunk); another owner's read finds
    no container; deleting or expiring it takes their bytes too."""
    big = os.urandom(CHUNK_BYTES + 10)
    skills = [(ContainerSkill("csv", "Reads CSV.", 3, "skill_1", "2"), b"zip"), (ContainerSkill("big", "B.", 0), big)]
    made = Container(
        id="cntr_s",
        created_at=NOW,
        last_active_at=NOW,
        name="s",
        expires_after=ExpiresAfter(anchor="last_active_at", minutes=IDLE_S // 60),
    )
    assert await store.put_container(A, made, NOW + IDLE_S, 100, skills)
    stored = await store.container_skills(A, "cntr_s", NOW)
    assert stored is not None and [one.skill for one in stored] == [skill for skill, _ in skills]
    for one, (_, data) in zip(stored, skills, strict=True):
        assert b"".join([chunk async for chunk in store.container_file_content(one.blob)]) == data
    assert await store.container_skills(B, "cntr_s", NOW) is None
    assert await store.container_skills(A, "cntr_s", NOW + IDLE_S) is None  # past its expiry
    assert await store.delete_container(A, "cntr_s", NOW)
    assert await chunk_rows(store) == 0
    # Refused for the owner's bound: nothing of it, its skills' bytes included, is kept.
    assert not await store.put_container(A, msgspec.structs.replace(made, id="cntr_t"), NOW + IDLE_S, 0, skills)
    assert await chunk_rows(store) == 0
    assert await store.put_container(A, msgspec.structs.replace(made, id="cntr_u"), NOW + IDLE_S, 100, skills)
    assert await store.expire_containers(NOW + 2 * IDLE_S, 10) == ["cntr_u"]
    assert await chunk_rows(store) == 0


async def test_the_redis_store_keeps_no_containers(tmp_path: Path) -> None:
    ns = namespace()
    redis = open_store(Settings(store_url=store_url("redis", ns, tmp_path), data_dir=str(tmp_path)))
    try:
        with pytest.raises(ContainersNotKept) as refused:
            await redis.get_container(A, "cntr_1", NOW)
        assert refused.value.status == 501 and refused.value.code == "containers_not_supported"
        assert await redis.expire_containers(NOW, 10) == []
    finally:
        await redis.close()
        await drop_namespace("redis", ns)
