"""The Containers half of the SQLite store (stores/containers.py). A container file's bytes go to `file_chunks` a
chunk a step, as a Files API file's do (sqlite_files.py); its row comes last, in one step that checks the container
is still there, its bounds and the path, so the file is readable whole or not at all."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

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
from hotloop.stores.sqlite_files import delete_chunks
from hotloop.wire.containers import Container, ContainerFile, container_decoder, file_decoder
from hotloop.wire.files import FileObject

T = TypeVar("T")
CONTAINER_SCHEMA = """
CREATE TABLE IF NOT EXISTS containers (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS containers_by_owner ON containers (owner, created_at, id);
CREATE INDEX IF NOT EXISTS containers_by_expiry ON containers (expires_at);
CREATE TABLE IF NOT EXISTS container_files (
    id TEXT PRIMARY KEY,
    container_id TEXT NOT NULL,
    path TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    blob TEXT NOT NULL,  -- the key of its bytes in file_chunks
    body BLOB NOT NULL,
    UNIQUE (container_id, path)
);
CREATE INDEX IF NOT EXISTS container_files_by_container ON container_files (container_id, created_at, id);
CREATE TABLE IF NOT EXISTS container_skills (
    container_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    blob TEXT NOT NULL,  -- the key of its zip in file_chunks
    body BLOB NOT NULL,
    PRIMARY KEY (container_id, position)
);
"""
_LIVE = "SELECT 1 FROM containers WHERE id = ? AND owner = ? AND expires_at > ?"
# ?1 owner, ?2 now, ?3 name (NULL: any), ?4 `after` (NULL: from the start; unknown: an empty page), ?5 rows.
_PAGE = """
SELECT body, last_active_at FROM containers WHERE owner = ?1 AND expires_at > ?2 AND (?3 IS NULL OR name = ?3)
AND (?4 IS NULL OR (created_at, id) {op} (SELECT created_at, id FROM containers WHERE id = ?4 AND owner = ?1))
ORDER BY created_at {direction}, id {direction} LIMIT ?5
"""
# ?1 container, ?2 `after`, ?3 rows.
_FILE_PAGE = """
SELECT body FROM container_files WHERE container_id = ?1
AND (?2 IS NULL OR (created_at, id) {op}
     (SELECT created_at, id FROM container_files WHERE id = ?2 AND container_id = ?1))
ORDER BY created_at {direction}, id {direction} LIMIT ?3
"""
_PAGES = {
    order: (_PAGE.format(op=op, direction=direction), _FILE_PAGE.format(op=op, direction=direction))
    for order, op, direction in (("asc", ">", "ASC"), ("desc", "<", "DESC"))
}
# The idle time (expires_at - last_active_at) is kept: it is the container's `expires_after.minutes`.
_TOUCH = (
    "UPDATE containers SET expires_at = ?3 + (expires_at - last_active_at), last_active_at = ?3"
    " WHERE id = ?1 AND owner = ?2 AND expires_at > ?3 RETURNING 1"
)
# ?1 container, ?2 the directories above the path (JSON), ?3 the path plus '/': a file there, or beneath.
_CLASH = """
SELECT 1 FROM container_files WHERE container_id = ?1
AND (path IN (SELECT value FROM json_each(?2)) OR substr(path, 1, length(?3)) = ?3) LIMIT 1
"""


_skill_decoder = msgspec.json.Decoder(ContainerSkill)


def _container(row: tuple[bytes, int]) -> Container:
    found = container_decoder.decode(row[0])
    found.last_active_at = int(row[1])
    return found


def _drop_files(conn: sqlite3.Connection, container_id: str) -> None:
    """A deleted container's files and skills, with their bytes."""
    blobs = conn.execute("DELETE FROM container_files WHERE container_id = ? RETURNING blob", (container_id,))
    conn.executemany("DELETE FROM file_chunks WHERE file_id = ?", blobs.fetchall())
    blobs = conn.execute("DELETE FROM container_skills WHERE container_id = ? RETURNING blob", (container_id,))
    conn.executemany("DELETE FROM file_chunks WHERE file_id = ?", blobs.fetchall())


def _place(
    owner: str, file: ContainerFile, blob: str, now: int, max_files: int, replace: bool
) -> Callable[[sqlite3.Connection], Placed]:
    """The last step of a put: the file's row (new, or its bytes swapped), or why not."""

    def work(conn: sqlite3.Connection) -> Placed:
        if conn.execute(_LIVE, (file.container_id, owner, now)).fetchone() is None:
            return Placed("missing")
        old = conn.execute(
            "SELECT body, blob FROM container_files WHERE container_id = ? AND path = ?", (file.container_id, file.path)
        ).fetchone()
        if old is not None:
            if not replace:
                return Placed("taken")
            kept = msgspec.structs.replace(file_decoder.decode(old[0]), bytes=file.bytes)
            conn.execute(
                "UPDATE container_files SET blob = ?, body = ? WHERE id = ?", (blob, msgspec.json.encode(kept), kept.id)
            )
            conn.execute("DELETE FROM file_chunks WHERE file_id = ?", (old[1],))
            placed = Placed("replaced", kept)
        else:
            clash = (file.container_id, json.dumps(parents(file.path)), file.path + "/")
            if conn.execute(_CLASH, clash).fetchone() is not None:
                return Placed("taken")
            held = conn.execute("SELECT COUNT(*) FROM container_files WHERE container_id = ?", (file.container_id,))
            if held.fetchone()[0] >= max_files:
                return Placed("full")
            conn.execute(
                "INSERT INTO container_files VALUES (?, ?, ?, ?, ?, ?)",
                (file.id, file.container_id, file.path, file.created_at, blob, msgspec.json.encode(file)),
            )
            placed = Placed("added", file)
        conn.execute(_TOUCH, (file.container_id, owner, now))
        return placed

    return work


def _copy_chunk(source: str, blob: str, seq: int) -> Callable[[sqlite3.Connection], int | None]:
    def work(conn: sqlite3.Connection) -> int | None:
        row = conn.execute(
            "INSERT INTO file_chunks SELECT ?, seq, data FROM file_chunks WHERE file_id = ? AND seq = ?"
            " RETURNING length(data)",
            (blob, source, seq),
        ).fetchone()
        return int(row[0]) if row else None

    return work


class SQLiteContainers:
    """`ContainerStore` for `SQLiteStore`, which provides `_read` and `_write`, and SQLiteFiles' blobs."""

    if TYPE_CHECKING:

        async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _put_blob(self, key: str, chunks: AsyncIterator[bytes]) -> int: ...

        def _blob_chunks(self, key: str) -> AsyncIterator[bytes]: ...

    async def put_container(
        self,
        owner: str,
        container: Container,
        expires_at: int,
        max_per_owner: int,
        skills: Sequence[tuple[ContainerSkill, bytes]] = (),
    ) -> bool:
        now, body = container.last_active_at, msgspec.json.encode(container)
        blobs = [new_id("sblob") for _ in skills]

        def work(conn: sqlite3.Connection) -> bool:
            held = conn.execute("SELECT COUNT(*) FROM containers WHERE owner = ? AND expires_at > ?", (owner, now))
            if held.fetchone()[0] >= max_per_owner:
                return False
            conn.execute(
                "INSERT INTO containers VALUES (?, ?, ?, ?, ?, ?, ?)",
                (container.id, owner, container.name, container.created_at, now, expires_at, body),
            )
            conn.executemany(
                "INSERT INTO container_skills VALUES (?, ?, ?, ?)",
                [
                    (container.id, n, blob, msgspec.json.encode(skill[0]))
                    for n, (skill, blob) in enumerate(zip(skills, blobs, strict=True))
                ],
            )
            return True

        stored = False
        try:  # the zips first, a chunk a step; the rows last, so a container has its skills whole or not at all
            for (_, data), blob in zip(skills, blobs, strict=True):
                await self._put_blob(blob, chunks_of(data))
            stored = await self._write(work)
            return stored
        finally:
            if not stored:
                for blob in blobs:
                    await asyncio.shield(self._write(delete_chunks(blob)))

    async def container_skills(self, owner: str, container_id: str, now: int) -> list[StoredSkill] | None:
        def work(conn: sqlite3.Connection) -> list[tuple[str, bytes]] | None:
            if conn.execute(_LIVE, (container_id, owner, now)).fetchone() is None:
                return None
            rows = conn.execute(
                "SELECT blob, body FROM container_skills WHERE container_id = ? ORDER BY position", (container_id,)
            )
            return [(row[0], bytes(row[1])) for row in rows.fetchall()]

        rows = await self._read(work)
        if rows is None:
            return None
        return [StoredSkill(_skill_decoder.decode(body), blob) for blob, body in rows]

    async def get_container(self, owner: str, container_id: str, now: int) -> Container | None:
        def work(conn: sqlite3.Connection) -> tuple[bytes, int] | None:
            row = conn.execute(
                "SELECT body, last_active_at FROM containers WHERE id = ? AND owner = ? AND expires_at > ?",
                (container_id, owner, now),
            ).fetchone()
            return (bytes(row[0]), row[1]) if row else None

        row = await self._read(work)
        return _container(row) if row else None

    async def list_containers(
        self, owner: str, now: int, *, after: str | None, limit: int, order: Order, name: str | None
    ) -> ContainerPage:
        def work(conn: sqlite3.Connection) -> list[tuple[bytes, int]]:
            rows = conn.execute(_PAGES[order][0], (owner, now, name, after, limit + 1)).fetchall()
            return [(bytes(row[0]), row[1]) for row in rows]

        rows = await self._read(work)
        return ContainerPage([_container(row) for row in rows[:limit]], len(rows) > limit)

    async def delete_container(self, owner: str, container_id: str, now: int) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            found = conn.execute(
                "DELETE FROM containers WHERE id = ? AND owner = ? AND expires_at > ? RETURNING 1",
                (container_id, owner, now),
            ).fetchone()
            if found is not None:
                _drop_files(conn, container_id)
            return found is not None

        return await self._write(work)

    async def touch_container(self, owner: str, container_id: str, now: int) -> bool:
        return await self._write(lambda conn: conn.execute(_TOUCH, (container_id, owner, now)).fetchone() is not None)

    async def expire_containers(self, now: int, limit: int) -> list[str]:
        def work(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "DELETE FROM containers WHERE id IN (SELECT id FROM containers WHERE expires_at <= ? LIMIT ?)"
                " RETURNING id",
                (now, limit),
            ).fetchall()
            for (container_id,) in rows:
                _drop_files(conn, container_id)
            return [row[0] for row in rows]

        return await self._write(work)

    async def live_containers(self, container_ids: Sequence[str], now: int) -> set[str]:
        def work(conn: sqlite3.Connection) -> set[str]:
            rows = conn.execute(
                "SELECT id FROM containers WHERE id IN (SELECT value FROM json_each(?)) AND expires_at > ?",
                (json.dumps(list(container_ids)), now),
            )
            return {row[0] for row in rows}

        return await self._read(work)

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
        placed = Placed("missing")
        try:
            if isinstance(content, FileObject):
                size = await self._copy_blob(content.id, blob)
                if not await self._read(lambda conn: _file_there(conn, owner, content.id)):
                    placed = Placed("gone")
                    return placed
            else:
                size = await self._put_blob(blob, content)
            placed = await self._write(
                _place(owner, msgspec.structs.replace(file, bytes=size), blob, now, max_files, replace)
            )
            return placed
        finally:
            if placed.outcome not in ("added", "replaced"):  # refused, or failed (a cancel included)
                await asyncio.shield(self._write(delete_chunks(blob)))

    async def _copy_blob(self, source: str, blob: str) -> int:
        seq = size = 0
        while (length := await self._write(_copy_chunk(source, blob, seq))) is not None:
            seq += 1
            size += length
        return size

    async def get_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> StoredFile | None:
        def work(conn: sqlite3.Connection) -> tuple[bytes, str] | None:
            row = conn.execute(
                "SELECT f.body, f.blob FROM container_files f JOIN containers c ON c.id = f.container_id"
                " WHERE f.id = ? AND f.container_id = ? AND c.owner = ? AND c.expires_at > ?",
                (file_id, container_id, owner, now),
            ).fetchone()
            return (bytes(row[0]), row[1]) if row else None

        row = await self._read(work)
        return StoredFile(file_decoder.decode(row[0]), row[1]) if row else None

    async def list_container_files(
        self, owner: str, container_id: str, now: int, *, after: str | None, limit: int, order: Order
    ) -> ContainerFilePage | None:
        def work(conn: sqlite3.Connection) -> list[bytes] | None:
            if conn.execute(_LIVE, (container_id, owner, now)).fetchone() is None:
                return None
            rows = conn.execute(_PAGES[order][1], (container_id, after, limit + 1)).fetchall()
            return [bytes(row[0]) for row in rows]

        bodies = await self._read(work)
        if bodies is None:
            return None
        return ContainerFilePage([file_decoder.decode(body) for body in bodies[:limit]], len(bodies) > limit)

    def container_file_content(self, blob: str) -> AsyncIterator[bytes]:
        return self._blob_chunks(blob)

    async def delete_container_file(self, owner: str, container_id: str, file_id: str, now: int) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if conn.execute(_LIVE, (container_id, owner, now)).fetchone() is None:
                return False
            row = conn.execute(
                "DELETE FROM container_files WHERE id = ? AND container_id = ? RETURNING blob", (file_id, container_id)
            ).fetchone()
            if row is None:
                return False
            conn.execute("DELETE FROM file_chunks WHERE file_id = ?", (row[0],))
            conn.execute(_TOUCH, (container_id, owner, now))
            return True

        return await self._write(work)


def _file_there(conn: sqlite3.Connection, owner: str, file_id: str) -> bool:
    return conn.execute("SELECT 1 FROM files WHERE id = ? AND owner = ?", (file_id, owner)).fetchone() is not None
