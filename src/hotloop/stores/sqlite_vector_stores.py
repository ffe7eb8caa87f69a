"""The Vector Stores half of the SQLite store (stores/vector_stores.py). Every write is one short step on the
store's writer thread; a file's chunks are written in parts (pipeline/filesearch/ingestion.py)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from hotloop.stores.vector_stores import (
    LEASE_S,
    MAX_ATTEMPTS,
    ChunkRow,
    Claim,
    Order,
    Page,
    StoredFile,
    batch_of,
    counted,
    interrupted,
    with_counts,
)
from hotloop.wire.vector_stores import (
    Attributes,
    FileCounts,
    LastError,
    VectorStore,
    VectorStoreFile,
    VectorStoreFileBatch,
    file_decoder,
    store_decoder,
)

T = TypeVar("T")
VECTOR_STORE_SCHEMA = """
CREATE TABLE IF NOT EXISTS vector_stores (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS vector_stores_by_owner ON vector_stores (owner, created_at, id);
CREATE TABLE IF NOT EXISTS vector_store_files (
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    batch_id TEXT,
    lease TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    model TEXT NOT NULL DEFAULT '',
    body BLOB NOT NULL,
    PRIMARY KEY (vector_store_id, file_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vector_store_files_pending ON vector_store_files (lease_until) WHERE status = 'in_progress';
CREATE INDEX IF NOT EXISTS vector_store_files_by_file ON vector_store_files (file_id);
CREATE INDEX IF NOT EXISTS vector_store_files_by_batch ON vector_store_files (batch_id) WHERE batch_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS vector_store_batches (
    id TEXT PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    cancelled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS vector_store_chunks (
    id INTEGER PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL,
    terms BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS vector_store_chunks_by_file ON vector_store_chunks (vector_store_id, file_id, seq);
"""
_COUNTS = "SELECT status, COUNT(*) FROM vector_store_files WHERE {where} GROUP BY status"
_STORE_PAGE = """
SELECT body FROM vector_stores WHERE owner = ?1
AND (?2 IS NULL OR (created_at, id) {op} (SELECT created_at, id FROM vector_stores WHERE id = ?2 AND owner = ?1))
ORDER BY created_at {direction}, id {direction} LIMIT ?3
"""
_FILE_PAGE = """
SELECT body FROM vector_store_files WHERE vector_store_id = ?1 AND owner = ?2
AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR batch_id = ?4)
AND (?5 IS NULL OR (created_at, file_id) {op}
     (SELECT created_at, file_id FROM vector_store_files WHERE vector_store_id = ?1 AND file_id = ?5))
ORDER BY created_at {direction}, file_id {direction} LIMIT ?6
"""
_PAGES = {
    order: (_STORE_PAGE.format(op=op, direction=direction), _FILE_PAGE.format(op=op, direction=direction))
    for order, op, direction in (("asc", ">", "ASC"), ("desc", "<", "DESC"))
}
_OWNED = "SELECT body FROM vector_stores WHERE id = ? AND owner = ?"
_HELD = "vector_store_id = ? AND file_id = ? AND status = 'in_progress' AND lease = ?"


def counts(conn: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> FileCounts:
    return counted(conn.execute(_COUNTS.format(where=where), args).fetchall())


def _store(conn: sqlite3.Connection, body: bytes, now: int) -> VectorStore:
    store = store_decoder.decode(body)
    row = conn.execute(
        "SELECT COALESCE(SUM(json_extract(body, '$.usage_bytes')), 0) FROM vector_store_files "
        "WHERE vector_store_id = ? AND status = 'completed'",
        (store.id,),
    ).fetchone()
    return with_counts(store, counts(conn, "vector_store_id = ?", (store.id,)), int(row[0]), now)


def _drop_chunks(conn: sqlite3.Connection, store_id: str, file_id: str) -> None:
    conn.execute("DELETE FROM vector_store_chunks WHERE vector_store_id = ? AND file_id = ?", (store_id, file_id))


def _bump(conn: sqlite3.Connection, store_id: str) -> None:
    conn.execute("UPDATE vector_stores SET version = version + 1 WHERE id = ?", (store_id,))


def _set_file(conn: sqlite3.Connection, file: VectorStoreFile) -> None:
    conn.execute(
        "UPDATE vector_store_files SET status = ?, body = ? WHERE vector_store_id = ? AND file_id = ?",
        (file.status, msgspec.json.encode(file), file.vector_store_id, file.id),
    )


def _held_file(conn: sqlite3.Connection, claim: Claim) -> VectorStoreFile | None:
    row = conn.execute(
        f"SELECT body FROM vector_store_files WHERE {_HELD}", (claim.vector_store_id, claim.file_id, claim.lease)
    ).fetchone()
    return file_decoder.decode(row[0]) if row else None


def remove_file_everywhere(conn: sqlite3.Connection, file_id: str) -> None:
    """A deleted file leaves every vector store it was in (OpenAI's delete does so)."""
    for (store_id,) in conn.execute(
        "DELETE FROM vector_store_files WHERE file_id = ? RETURNING vector_store_id", (file_id,)
    ).fetchall():
        _drop_chunks(conn, store_id, file_id)
        _bump(conn, store_id)


class SQLiteVectorStores:
    """`VectorStoreStore` for `SQLiteStore`, which provides `_read` and `_write`."""

    if TYPE_CHECKING:

        async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

    async def put_vector_store(self, owner: str, store: VectorStore) -> None:
        body = msgspec.json.encode(store)
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO vector_stores (id, owner, created_at, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET body = excluded.body WHERE owner = excluded.owner",
                (store.id, owner, store.created_at, body),
            )
        )

    async def get_vector_store(self, owner: str, store_id: str, counted: bool = True) -> VectorStore | None:
        now = int(time.time())

        def work(conn: sqlite3.Connection) -> VectorStore | None:
            row = conn.execute(_OWNED, (store_id, owner)).fetchone()
            if row is None:
                return None
            if not counted:
                return with_counts(store_decoder.decode(row[0]), FileCounts(), 0, now)
            return _store(conn, row[0], now)

        return await self._read(work)

    async def list_vector_stores(self, owner: str, *, after: str | None, limit: int, order: Order) -> Page:
        now = int(time.time())

        def work(conn: sqlite3.Connection) -> Page:
            rows = conn.execute(_PAGES[order][0], (owner, after, limit + 1)).fetchall()
            return Page([_store(conn, row[0], now) for row in rows[:limit]], len(rows) > limit)

        return await self._read(work)

    async def delete_vector_store(self, owner: str, store_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if not conn.execute(
                "DELETE FROM vector_stores WHERE id = ? AND owner = ? RETURNING 1", (store_id, owner)
            ).fetchone():
                return False
            conn.execute("DELETE FROM vector_store_chunks WHERE vector_store_id = ?", (store_id,))
            conn.execute("DELETE FROM vector_store_files WHERE vector_store_id = ?", (store_id,))
            conn.execute("DELETE FROM vector_store_batches WHERE vector_store_id = ?", (store_id,))
            return True

        return await self._write(work)

    async def touch_vector_store(self, owner: str, store_id: str, now: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT body FROM vector_stores WHERE id = ? AND owner = ?", (store_id, owner)
            ).fetchone()
            if row is None:
                return
            store = store_decoder.decode(row[0])
            store.last_active_at = now
            if store.expires_after is not None:
                store.expires_at = now + store.expires_after.days * 86400
            conn.execute("UPDATE vector_stores SET body = ? WHERE id = ?", (msgspec.json.encode(store), store_id))

        await self._write(work)

    async def add_store_files(self, owner: str, files: Sequence[VectorStoreFile], batch_id: str | None) -> None:
        rows = [
            (f.vector_store_id, f.id, owner, f.created_at, f.status, batch_id, msgspec.json.encode(f)) for f in files
        ]

        def work(conn: sqlite3.Connection) -> None:
            if batch_id is not None and files:
                conn.execute(
                    "INSERT INTO vector_store_batches (id, vector_store_id, owner, created_at) VALUES (?, ?, ?, ?)",
                    (batch_id, files[0].vector_store_id, owner, files[0].created_at),
                )
            for row in rows:
                if conn.execute(
                    "SELECT status FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?", row[:2]
                ).fetchone() == ("completed",):
                    _bump(conn, row[0])  # its old chunks stop counting
                _drop_chunks(conn, row[0], row[1])
            conn.executemany(
                "INSERT OR REPLACE INTO vector_store_files "
                "(vector_store_id, file_id, owner, created_at, status, batch_id, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

        await self._write(work)

    async def get_store_file(self, owner: str, store_id: str, file_id: str) -> VectorStoreFile | None:
        def work(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT body FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND owner = ?",
                (store_id, file_id, owner),
            ).fetchone()
            return row[0] if row else None

        body = await self._read(work)
        return file_decoder.decode(body) if body is not None else None

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
    ) -> Page:
        def work(conn: sqlite3.Connection) -> list[bytes]:
            args = (store_id, owner, status, batch_id, after, limit + 1)
            return [row[0] for row in conn.execute(_PAGES[order][1], args)]

        bodies = await self._read(work)
        return Page([file_decoder.decode(body) for body in bodies[:limit]], len(bodies) > limit)

    async def update_store_file(
        self, owner: str, store_id: str, file_id: str, attributes: Attributes | None
    ) -> VectorStoreFile | None:
        def work(conn: sqlite3.Connection) -> VectorStoreFile | None:
            row = conn.execute(
                "SELECT body FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND owner = ?",
                (store_id, file_id, owner),
            ).fetchone()
            if row is None:
                return None
            file = file_decoder.decode(row[0])
            file.attributes = attributes
            _set_file(conn, file)
            _bump(conn, store_id)
            return file

        return await self._write(work)

    async def delete_store_file(self, owner: str, store_id: str, file_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if not conn.execute(
                "DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND owner = ? RETURNING 1",
                (store_id, file_id, owner),
            ).fetchone():
                return False
            _drop_chunks(conn, store_id, file_id)
            _bump(conn, store_id)
            return True

        return await self._write(work)

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        return await self._read(lambda conn: _batch(conn, owner, store_id, batch_id))

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        def work(conn: sqlite3.Connection) -> VectorStoreFileBatch | None:
            if not conn.execute(
                "UPDATE vector_store_batches SET cancelled = 1 WHERE id = ? AND vector_store_id = ? AND owner = ? "
                "RETURNING 1",
                (batch_id, store_id, owner),
            ).fetchone():
                return None
            for (body,) in conn.execute(
                "SELECT body FROM vector_store_files WHERE batch_id = ? AND status = 'in_progress'", (batch_id,)
            ).fetchall():
                file = file_decoder.decode(body)
                file.status = "cancelled"
                _set_file(conn, file)
                _drop_chunks(conn, store_id, file.id)
            return _batch(conn, owner, store_id, batch_id)

        return await self._write(work)

    async def file_counts(self, store_id: str) -> FileCounts:
        return await self._read(lambda conn: counts(conn, "vector_store_id = ?", (store_id,)))

    # -- ingestion --------------------------------------------------------------------------------------------------

    async def claim_file(self, lease: str, now: float) -> Claim | None:
        def work(conn: sqlite3.Connection) -> Claim | None:
            while True:
                row = conn.execute(
                    "SELECT vector_store_id, file_id, owner, attempts, body FROM vector_store_files "
                    "WHERE status = 'in_progress' AND lease_until < ? ORDER BY lease_until, created_at LIMIT 1",
                    (now,),
                ).fetchone()
                if row is None:
                    return None
                store_id, file_id, owner, attempts, body = row
                file = file_decoder.decode(body)
                _drop_chunks(conn, store_id, file_id)  # what an interrupted attempt wrote
                if attempts >= MAX_ATTEMPTS:
                    file.status, file.last_error = "failed", interrupted(attempts)
                    _set_file(conn, file)
                    continue
                conn.execute(
                    "UPDATE vector_store_files SET lease = ?, lease_until = ?, attempts = attempts + 1 "
                    "WHERE vector_store_id = ? AND file_id = ?",
                    (lease, now + LEASE_S, store_id, file_id),
                )
                return Claim.of(owner, file, lease, attempts + 1)

        return await self._write(work)

    async def renew_lease(self, claim: Claim, now: float) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            done = conn.execute(
                f"UPDATE vector_store_files SET lease_until = ? WHERE {_HELD} RETURNING 1",
                (now + LEASE_S, claim.vector_store_id, claim.file_id, claim.lease),
            )
            return done.fetchone() is not None

        return await self._write(work)

    async def save_chunks(self, claim: Claim, rows: Sequence[ChunkRow]) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if _held_file(conn, claim) is None:
                return False
            conn.executemany(
                'INSERT INTO vector_store_chunks (vector_store_id, file_id, seq, start, "end", text, vector, terms) '
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (claim.vector_store_id, claim.file_id, row.seq, row.start, row.end, row.text, row.vector, row.terms)
                    for row in rows
                ],
            )
            return True

        return await self._write(work)

    async def complete_file(self, claim: Claim, usage_bytes: int, model: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            file = _held_file(conn, claim)
            if file is None:
                _drop_chunks_unless_held(conn, claim)
                return False
            file.status, file.usage_bytes, file.last_error = "completed", usage_bytes, None
            _set_file(conn, file)
            conn.execute(
                "UPDATE vector_store_files SET model = ? WHERE vector_store_id = ? AND file_id = ?",
                (model, claim.vector_store_id, claim.file_id),
            )
            _bump(conn, claim.vector_store_id)
            return True

        return await self._write(work)

    async def fail_file(self, claim: Claim, error: LastError) -> None:
        def work(conn: sqlite3.Connection) -> None:
            file = _held_file(conn, claim)
            if file is not None:
                file.status, file.last_error = "failed", error
                _set_file(conn, file)
                _drop_chunks(conn, claim.vector_store_id, claim.file_id)

        await self._write(work)

    # -- search -----------------------------------------------------------------------------------------------------

    async def index_version(self, store_id: str) -> int | None:
        def work(conn: sqlite3.Connection) -> int | None:
            row = conn.execute("SELECT version FROM vector_stores WHERE id = ?", (store_id,)).fetchone()
            return int(row[0]) if row else None

        return await self._read(work)

    async def stored_files(self, store_id: str) -> list[StoredFile]:
        def work(conn: sqlite3.Connection) -> list[StoredFile]:
            rows = conn.execute(
                "SELECT v.file_id, f.body, v.body, v.lease, v.model FROM vector_store_files v "
                "JOIN files f ON f.id = v.file_id "
                "WHERE v.vector_store_id = ? AND v.status = 'completed'",
                (store_id,),
            ).fetchall()
            out = []
            for file_id, file_body, body, lease, model in rows:
                filename = msgspec.json.decode(file_body)["filename"]
                out.append(StoredFile(file_id, filename, file_decoder.decode(body).attributes, lease or "", model))
            return out

        return await self._read(work)

    async def chunk_vectors(self, store_id: str, file_id: str) -> tuple[list[int], bytes, list[bytes]]:
        def work(conn: sqlite3.Connection) -> tuple[list[int], bytes, list[bytes]]:
            rows = conn.execute(
                "SELECT id, vector, terms FROM vector_store_chunks WHERE vector_store_id = ? AND file_id = ? "
                "ORDER BY seq",
                (store_id, file_id),
            ).fetchall()
            return [row[0] for row in rows], b"".join(row[1] for row in rows), [row[2] for row in rows]

        return await self._read(work)

    async def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        ids = list(chunk_ids)

        def work(conn: sqlite3.Connection) -> dict[int, str]:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(f"SELECT id, text FROM vector_store_chunks WHERE id IN ({marks})", ids)
            return {int(row[0]): row[1] for row in rows}

        return await self._read(work) if ids else {}

    async def file_text(self, store_id: str, file_id: str) -> list[tuple[int, int, str]]:
        def work(conn: sqlite3.Connection) -> list[tuple[int, int, str]]:
            rows = conn.execute(
                'SELECT start, "end", text FROM vector_store_chunks WHERE vector_store_id = ? AND file_id = ? '
                "ORDER BY seq",
                (store_id, file_id),
            )
            return [(row[0], row[1], row[2]) for row in rows]

        return await self._read(work)


def _batch(conn: sqlite3.Connection, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
    row = conn.execute(
        "SELECT created_at, cancelled FROM vector_store_batches WHERE id = ? AND vector_store_id = ? AND owner = ?",
        (batch_id, store_id, owner),
    ).fetchone()
    if row is None:
        return None
    return batch_of(batch_id, store_id, row[0], bool(row[1]), counts(conn, "batch_id = ?", (batch_id,)))


def _drop_chunks_unless_held(conn: sqlite3.Connection, claim: Claim) -> None:
    """A claim lost (cancelled, removed, or taken over by another worker whose chunks are its own): drop only what
    this claim wrote, which is everything unless the file is held again."""
    held = conn.execute(
        "SELECT 1 FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND status = 'in_progress'",
        (claim.vector_store_id, claim.file_id),
    ).fetchone()
    if held is None:
        _drop_chunks(conn, claim.vector_store_id, claim.file_id)
