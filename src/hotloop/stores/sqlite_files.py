"""The Files API's half of the SQLite store (stores/files.py). A file's bytes go in one chunk per write, each its
own short step on the store's writer thread, so a large upload never holds the writer that saves responses; the
file's row comes last, making it readable whole or not at all."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, BinaryIO, Literal, TypeVar

import msgspec

from hotloop.stores.files import FilePage, chunks_of
from hotloop.stores.sqlite_vector_stores import remove_file_everywhere
from hotloop.wire.files import FileObject, file_decoder

T = TypeVar("T")
FILE_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    purpose TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_owner ON files (owner, created_at, id);
CREATE INDEX IF NOT EXISTS files_by_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS file_chunks (
    file_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (file_id, seq)
) WITHOUT ROWID;
"""
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
# ?1 owner, ?2 purpose (NULL: any), ?3 now, ?4 `after` (NULL: from the start; unknown: NULL, an empty page), ?5 rows.
_PAGE = """
SELECT body FROM files WHERE owner = ?1 AND (?2 IS NULL OR purpose = ?2) AND (expires_at IS NULL OR expires_at > ?3)
AND (?4 IS NULL OR (created_at, id) {op} (SELECT created_at, id FROM files WHERE id = ?4 AND owner = ?1))
ORDER BY created_at {direction}, id {direction} LIMIT ?5
"""
_PAGES = {"asc": _PAGE.format(op=">", direction="ASC"), "desc": _PAGE.format(op="<", direction="DESC")}


class SQLiteFiles:
    """`FileStore` for `SQLiteStore`, which provides `_read` and `_write`."""

    if TYPE_CHECKING:

        async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _put_blob(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        """Write bytes under `key` in `file_chunks`, a chunk a step; their size. The caller deletes them on failure.
        A container file's bytes go the same way (sqlite_containers.py)."""
        seq = size = 0
        async for chunk in chunks:
            await self._write(insert_chunk(key, seq, chunk))
            seq += 1
            size += len(chunk)
        return size

    async def _blob_chunks(self, key: str) -> AsyncIterator[bytes]:
        seq = 0
        while (chunk := await self._read(chunk_at(key, seq))) is not None:
            yield chunk
            seq += 1

    async def put_file(self, owner: str, file: FileObject, content: BinaryIO) -> None:
        try:
            await self._put_blob(file.id, chunks_of(content))
            body = msgspec.json.encode(file)

            def insert(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "INSERT INTO files VALUES (?, ?, ?, ?, ?, ?)",
                    (file.id, owner, file.purpose, file.created_at, file.expires_at, body),
                )

            await self._write(insert)
        except BaseException:
            await asyncio.shield(self._write(delete_chunks(file.id)))
            raise

    async def get_file(self, owner: str, file_id: str) -> FileObject | None:
        now = int(time.time())

        def work(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                f"SELECT body FROM files WHERE id = ? AND owner = ? AND {_LIVE}", (file_id, owner, now)
            ).fetchone()
            return bytes(row[0]) if row else None

        body = await self._read(work)
        return file_decoder.decode(body) if body is not None else None

    async def list_files(
        self, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"], purpose: str | None
    ) -> FilePage:
        now = int(time.time())

        def work(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(_PAGES[order], (owner, purpose, now, after, limit + 1)).fetchall()
            return [bytes(row[0]) for row in rows]

        bodies = await self._read(work)
        return FilePage([file_decoder.decode(body) for body in bodies[:limit]], len(bodies) > limit)

    def file_content(self, owner: str, file: FileObject) -> AsyncIterator[bytes]:
        return self._blob_chunks(file.id)

    async def delete_file(self, owner: str, file_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            deleted = conn.execute("DELETE FROM files WHERE id = ? AND owner = ? RETURNING 1", (file_id, owner))
            if deleted.fetchone() is None:
                return False
            conn.execute("DELETE FROM file_chunks WHERE file_id = ?", (file_id,))
            remove_file_everywhere(conn, file_id)
            return True

        return await self._write(work)

    async def expire_files(self, now: int, limit: int) -> int:
        def work(conn: sqlite3.Connection) -> int:
            rows = conn.execute(
                "DELETE FROM files WHERE id IN (SELECT id FROM files WHERE expires_at <= ? LIMIT ?) RETURNING id",
                (now, limit),
            ).fetchall()
            conn.executemany("DELETE FROM file_chunks WHERE file_id = ?", rows)
            for (file_id,) in rows:
                remove_file_everywhere(conn, file_id)
            return len(rows)

        return await self._write(work)


def insert_chunk(file_id: str, seq: int, chunk: bytes) -> Callable[[sqlite3.Connection], None]:
    def work(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO file_chunks VALUES (?, ?, ?)", (file_id, seq, chunk))

    return work


def delete_chunks(file_id: str) -> Callable[[sqlite3.Connection], None]:
    def work(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM file_chunks WHERE file_id = ?", (file_id,))

    return work


def chunk_at(file_id: str, seq: int) -> Callable[[sqlite3.Connection], bytes | None]:
    def work(conn: sqlite3.Connection) -> bytes | None:
        row = conn.execute("SELECT data FROM file_chunks WHERE file_id = ? AND seq = ?", (file_id, seq)).fetchone()
        return bytes(row[0]) if row else None

    return work
