"""The Containers half of the PostgreSQL store (stores/containers.py; SQL in postgres_container_sql.py). A container
file's chunks and its row go in one transaction, as a Files API file's do (postgres_files.py); the container's row
is held (`FOR UPDATE`) only at the end, while the file's row is placed, so an upload never blocks the container's
other files or its touches for longer than that. Creates by one owner queue on an advisory lock, so the
per-key bound counts what the previous create left."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from hotloop.ids import new_id
from hotloop.stores.containers import (
    ContainerFilePage,
    ContainerPage,
    ContainerSkill,
    Order,
    Placed,
    StoredFile,
    StoredSkill,
    parents,
)
from hotloop.stores.files import chunks_of
from hotloop.stores.health import Health
from hotloop.wire.containers import Container, ContainerFile, container_decoder, file_decoder
from hotloop.wire.files import FileObject


class _Refused(Exception):
    """Rolls a put's transaction back (its chunks with it) and says why."""

    def __init__(self, placed: Placed) -> None:
        self.placed = placed


_skill_decoder = msgspec.json.Decoder(ContainerSkill)


def _container(row: Any) -> Container:
    found = container_decoder.decode(row[0])
    found.last_active_at = int(row[1])
    return found


class PostgresContainers:
    """`ContainerStore` for `PostgresStore`, which provides `_fetch`, `_connected`, `health`, `_sql` and
    PostgresFiles' blobs."""

    if TYPE_CHECKING:
        health: Health
        _sql: dict[str, str]

        async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _connected(self) -> asyncpg.Pool: ...

        async def _put_blob(self, conn: Any, key: str, chunks: AsyncIterator[bytes]) -> int: ...

        def _blob_chunks(self, key: str) -> AsyncIterator[bytes]: ...

        def _transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def put_container(
        self,
        owner: str,
        container: Container,
        expires_at: int,
        max_per_owner: int,
        skills: Sequence[tuple[ContainerSkill, bytes]] = (),
    ) -> bool:
        now, body = container.last_active_at, msgspec.json.encode(container)
        async with self._transaction() as conn:
            await conn.execute(self._sql["C_OWNER_LOCK"], owner)
            if await conn.fetchval(self._sql["C_COUNT"], owner, now) >= max_per_owner:
                return False
            args = (container.id, owner, container.name, container.created_at, now, expires_at, body)
            await conn.execute(self._sql["C_INSERT"], *args)
            for position, (skill, data) in enumerate(skills):  # in the transaction: all of them, or none
                blob = new_id("sblob")
                await self._put_blob(conn, blob, chunks_of(data))
                await conn.execute(self._sql["CS_INSERT"], container.id, position, blob, msgspec.json.encode(skill))
            return True

    async def container_skills(self, owner: str, container_id: str, now: int) -> list[StoredSkill] | None:
        if not await self._fetch("C_GET", container_id, owner, now):
            return None
        rows = await self._fetch("CS_LIST", container_id, owner, now)
        return [StoredSkill(_skill_decoder.decode(row[1]), row[0]) for row in rows]

    async def get_container(self, owner: str, container_id: str, now: int) -> Container | None:
        rows = await self._fetch("C_GET", container_id, owner, now)
        return _container(rows[0]) if rows else None

    async def list_containers(
        self, owner: str, now: int, *, after: str | None, limit: int, order: Order, name: str | None
    ) -> ContainerPage:
        rows = await self._fetch(f"C_LIST_{order.upper()}", owner, now, name, after, limit + 1)
        return ContainerPage([_container(row) for row in rows[:limit]], len(rows) > limit)

    async def delete_container(self, owner: str, container_id: str, now: int) -> bool:
        async with self._transaction() as conn:
            if not await conn.fetch(self._sql["C_DELETE"], container_id, owner, now):
                return False
            await conn.execute(self._sql["C_DROP_FILES"], [container_id])
            return True

    async def touch_container(self, owner: str, container_id: str, now: int) -> bool:
        return bool(await self._fetch("C_TOUCH", container_id, owner, now))

    async def expire_containers(self, now: int, limit: int) -> list[str]:
        async with self._transaction() as conn:
            gone = [row[0] for row in await conn.fetch(self._sql["C_EXPIRE"], now, limit)]
            if gone:
                await conn.execute(self._sql["C_DROP_FILES"], gone)
            return gone

    async def live_containers(self, container_ids: Sequence[str], now: int) -> set[str]:
        return {row[0] for row in await self._fetch("C_LIVE", list(container_ids), now)}

    async def put_container_file(
        self,
        owner: str,
        file: ContainerFile,
        content: AsyncIterator[bytes] | FileObject,
        *,
        now: int,
        max_files: int,
        replace: bool,
    ) -> Placed:
        blob = new_id("cblob")
        try:
            async with self._transaction() as conn:
                if isinstance(content, FileObject):
                    size = await self._copy_blob(conn, content.id, blob)
                    if await conn.fetchval(self._sql["CF_SOURCE"], content.id, owner) is None:
                        raise _Refused(Placed("gone"))
                else:
                    size = await self._put_blob(conn, blob, content)
                sized = msgspec.structs.replace(file, bytes=size)
                placed = await self._place(conn, owner, sized, blob, now=now, max_files=max_files)
                if placed.outcome == "taken" and replace:
                    placed = await self._replace(conn, file.container_id, file.path, size, blob)
                if placed.outcome not in ("added", "replaced"):
                    raise _Refused(placed)
                await conn.execute(self._sql["C_TOUCH"], file.container_id, owner, now)
                return placed
        except _Refused as refused:
            return refused.placed

    async def _copy_blob(self, conn: Any, source: str, blob: str) -> int:
        seq = size = 0
        while (length := await conn.fetchval(self._sql["CF_COPY_CHUNK"], source, blob, seq)) is not None:
            seq += 1
            size += length
        return size

    async def _place(
        self, conn: Any, owner: str, file: ContainerFile, blob: str, *, now: int, max_files: int
    ) -> Placed:
        """The file's row under the container's lock, or why not (`taken` when a file is at its path)."""
        if await conn.fetchval(self._sql["C_HOLD"], file.container_id, owner, now) is None:
            return Placed("missing")
        clashing = [file.path, *parents(file.path)]
        if await conn.fetchval(self._sql["CF_CLASH"], file.container_id, clashing, file.path + "/"):
            return Placed("taken")
        if await conn.fetchval(self._sql["CF_COUNT"], file.container_id) >= max_files:
            return Placed("full")
        body = msgspec.json.encode(file)
        await conn.execute(self._sql["CF_INSERT"], file.id, file.container_id, file.path, file.created_at, blob, body)
        return Placed("added", file)

    async def _replace(self, conn: Any, container_id: str, path: str, size: int, blob: str) -> Placed:
        """New bytes for the file at `path`, if a file is at it (not a directory of it: then `taken`)."""
        old = await conn.fetchrow(self._sql["CF_AT"], container_id, path)
        if old is None:
            return Placed("taken")
        kept = msgspec.structs.replace(file_decoder.decode(old[0]), bytes=size)
        await conn.execute(self._sql["CF_REPLACE"], kept.id, blob, msgspec.json.encode(kept))
        await conn.execute(self._sql["DELETE_CHUNKS"], old[1])
        return Placed("replaced", kept)

    async def get_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> StoredFile | None:
        rows = await self._fetch("CF_GET", file_id, container_id, owner, now)
        return StoredFile(file_decoder.decode(rows[0][0]), rows[0][1]) if rows else None

    async def list_container_files(
        self, owner: str, container_id: str, now: int, *, after: str | None, limit: int, order: Order
    ) -> ContainerFilePage | None:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn:
                if await conn.fetchval(self._sql["C_GET"], container_id, owner, now) is None:
                    return None
                rows = await conn.fetch(self._sql[f"CF_LIST_{order.upper()}"], container_id, after, limit + 1)
        return ContainerFilePage([file_decoder.decode(row[0]) for row in rows[:limit]], len(rows) > limit)

    def container_file_content(self, blob: str) -> AsyncIterator[bytes]:
        return self._blob_chunks(blob)

    async def delete_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(self._sql["C_HOLD"], container_id, owner, now) is None:
                return False
            blob = await conn.fetchval(self._sql["CF_DELETE"], file_id, container_id)
            if blob is None:
                return False
            await conn.execute(self._sql["DELETE_CHUNKS"], blob)
            await conn.execute(self._sql["C_TOUCH"], container_id, owner, now)
            return True
