"""The Files API's half of the PostgreSQL store (stores/files.py): a file's chunks and its row in one transaction
(readable whole or not at all; PostgreSQL's other sessions go on meanwhile), reads one chunk per statement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import asyncpg
import msgspec

from hotloop.stores.files import FilePage, chunks_of
from hotloop.stores.health import Health
from hotloop.wire.files import FileObject, file_decoder


class PostgresFiles:
    """`FileStore` for `PostgresStore`, which provides `_fetch`, `_connected`, `health` and `_sql`."""

    if TYPE_CHECKING:
        health: Health
        _sql: dict[str, str]

        async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _connected(self) -> asyncpg.Pool: ...

        async def remove_file_everywhere(self, conn: Any, file_id: str) -> None: ...

    async def _put_blob(self, conn: Any, key: str, chunks: AsyncIterator[bytes]) -> int:
        """Write bytes under `key` in `file_chunks` within the caller's transaction; their size. A container file's
        bytes go the same way (postgres_containers.py)."""
        seq = size = 0
        async for chunk in chunks:
            await conn.execute(self._sql["INSERT_FILE_CHUNK"], key, seq, chunk)
            seq += 1
            size += len(chunk)
        return size

    async def _blob_chunks(self, key: str) -> AsyncIterator[bytes]:
        seq = 0
        while rows := await self._fetch("FILE_CHUNK", key, seq):
            yield bytes(rows[0][0])
            seq += 1

    async def put_file(self, owner: str, file: FileObject, content: BinaryIO) -> None:
        body = msgspec.json.encode(file)
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                await self._put_blob(conn, file.id, chunks_of(content))
                await conn.execute(
                    self._sql["INSERT_FILE"], file.id, owner, file.purpose, file.created_at, file.expires_at, body
                )

    async def get_file(self, owner: str, file_id: str) -> FileObject | None:
        rows = await self._fetch("GET_FILE", file_id, owner)
        return file_decoder.decode(rows[0][0]) if rows else None

    async def list_files(
        self, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"], purpose: str | None
    ) -> FilePage:
        rows = await self._fetch(f"LIST_FILES_{order.upper()}", owner, purpose, after, limit + 1)
        return FilePage([file_decoder.decode(row[0]) for row in rows[:limit]], len(rows) > limit)

    def file_content(self, owner: str, file: FileObject) -> AsyncIterator[bytes]:
        return self._blob_chunks(file.id)

    async def delete_file(self, owner: str, file_id: str) -> bool:
        """With its place in every vector store (postgres_vector_stores.py), in the same transaction."""
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                if not await conn.fetch(self._sql["DELETE_FILE"], file_id, owner):
                    return False
                await self.remove_file_everywhere(conn, file_id)
                return True

    async def expire_files(self, now: int, limit: int) -> int:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                gone = await conn.fetch(self._sql["EXPIRE_FILES"], now, limit)
                for row in gone:
                    await self.remove_file_everywhere(conn, row[0])
                return len(gone)
