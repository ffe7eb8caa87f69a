"""The Vector Stores half of the PostgreSQL store (stores/vector_stores.py; SQL in postgres_vector_sql.py). What
changes a file's state runs in one transaction holding its row (`FOR UPDATE`), so replicas racing for a file, a
cancel and a worker's completion settle in one order; claims skip rows another replica holds (`SKIP LOCKED`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from hotloop.stores.health import Health
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


class PostgresVectorStores:
    """`VectorStoreStore` for `PostgresStore`, which provides `_fetch`, `_connected`, `health` and `_sql`."""

    if TYPE_CHECKING:
        health: Health
        _sql: dict[str, str]

        async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _connected(self) -> asyncpg.Pool: ...

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn, conn.transaction():
                yield conn

    async def _store(self, conn: Any, body: bytes, now: int) -> VectorStore:
        store = store_decoder.decode(body)
        counts = counted(await conn.fetch(self._sql["VS_COUNTS"], store.id))
        usage = await conn.fetchval(self._sql["VS_USAGE"], store.id)
        return with_counts(store, counts, int(usage), now)

    async def _set_file(self, conn: Any, file: VectorStoreFile) -> None:
        body = msgspec.json.encode(file)
        await conn.execute(self._sql["VSF_SET"], file.vector_store_id, file.id, file.status, body, file.usage_bytes)

    async def _held(self, conn: Any, claim: Claim) -> VectorStoreFile | None:
        body = await conn.fetchval(self._sql["VSF_HELD"], claim.vector_store_id, claim.file_id, claim.lease)
        return file_decoder.decode(body) if body is not None else None

    async def put_vector_store(self, owner: str, store: VectorStore) -> None:
        await self._fetch("VS_PUT", store.id, owner, store.created_at, msgspec.json.encode(store))

    async def get_vector_store(self, owner: str, store_id: str, counted: bool = True) -> VectorStore | None:
        if not counted:
            rows = await self._fetch("VS_OWNED", store_id, owner)
            now = int(time.time())
            return with_counts(store_decoder.decode(rows[0][0]), FileCounts(), 0, now) if rows else None
        async with self._transaction() as conn:
            body = await conn.fetchval(self._sql["VS_OWNED"], store_id, owner)
            return await self._store(conn, body, int(time.time())) if body is not None else None

    async def list_vector_stores(self, owner: str, *, after: str | None, limit: int, order: Order) -> Page:
        now = int(time.time())
        async with self._transaction() as conn:
            rows = await conn.fetch(self._sql[f"VS_PAGE_{order.upper()}"], owner, after, limit + 1)
            stores = [await self._store(conn, row[0], now) for row in rows[:limit]]
        return Page(stores, len(rows) > limit)

    async def delete_vector_store(self, owner: str, store_id: str) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(self._sql["VS_DELETE"], store_id, owner) is None:
                return False
            await conn.execute(self._sql["VS_DELETE_REST"], store_id)
            return True

    async def touch_vector_store(self, owner: str, store_id: str, now: int) -> None:
        async with self._transaction() as conn:
            body = await conn.fetchval(self._sql["VS_OWNED"] + " FOR UPDATE", store_id, owner)
            if body is None:
                return
            store = store_decoder.decode(body)
            store.last_active_at = now
            if store.expires_after is not None:
                store.expires_at = now + store.expires_after.days * 86400
            await conn.execute(self._sql["VS_SET_BODY"], store_id, msgspec.json.encode(store))

    async def add_store_files(self, owner: str, files: Sequence[VectorStoreFile], batch_id: str | None) -> None:
        if not files:
            return
        async with self._transaction() as conn:
            if batch_id is not None:
                await conn.execute(
                    self._sql["VSB_INSERT"], batch_id, files[0].vector_store_id, owner, files[0].created_at
                )
            for file in files:
                if await conn.fetchval(self._sql["VSF_STATUS"], file.vector_store_id, file.id) == "completed":
                    await conn.execute(self._sql["VS_BUMP"], file.vector_store_id)
                await conn.execute(self._sql["VSC_DROP"], file.vector_store_id, file.id)
            await conn.executemany(
                self._sql["VSF_UPSERT"],
                [
                    (f.vector_store_id, f.id, owner, f.created_at, f.status, batch_id, msgspec.json.encode(f))
                    for f in files
                ],
            )

    async def get_store_file(self, owner: str, store_id: str, file_id: str) -> VectorStoreFile | None:
        rows = await self._fetch("VSF_GET", store_id, file_id, owner)
        return file_decoder.decode(rows[0][0]) if rows else None

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
        rows = await self._fetch(f"VSF_PAGE_{order.upper()}", store_id, owner, status, batch_id, after, limit + 1)
        return Page([file_decoder.decode(row[0]) for row in rows[:limit]], len(rows) > limit)

    async def update_store_file(
        self, owner: str, store_id: str, file_id: str, attributes: Attributes | None
    ) -> VectorStoreFile | None:
        async with self._transaction() as conn:
            body = await conn.fetchval(self._sql["VSF_GET"] + " FOR UPDATE", store_id, file_id, owner)
            if body is None:
                return None
            file = file_decoder.decode(body)
            file.attributes = attributes
            await self._set_file(conn, file)
            await conn.execute(self._sql["VS_BUMP"], store_id)
            return file

    async def delete_store_file(self, owner: str, store_id: str, file_id: str) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(self._sql["VSF_DELETE"], store_id, file_id, owner) is None:
                return False
            await conn.execute(self._sql["VSC_DROP"], store_id, file_id)
            await conn.execute(self._sql["VS_BUMP"], store_id)
            return True

    async def remove_file_everywhere(self, conn: Any, file_id: str) -> None:
        """A deleted file leaves every vector store it was in (postgres_files.py calls this in its transaction)."""
        for row in await conn.fetch(self._sql["VSF_REMOVE_FILE"], file_id):
            await conn.execute(self._sql["VSC_DROP"], row[0], file_id)
            await conn.execute(self._sql["VS_BUMP"], row[0])

    async def _batch(self, conn: Any, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        row = await conn.fetchrow(self._sql["VSB_GET"], batch_id, store_id, owner)
        if row is None:
            return None
        counts = counted(await conn.fetch(self._sql["VSB_COUNTS"], batch_id))
        return batch_of(batch_id, store_id, row[0], bool(row[1]), counts)

    async def get_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        async with self._transaction() as conn:
            return await self._batch(conn, owner, store_id, batch_id)

    async def cancel_batch(self, owner: str, store_id: str, batch_id: str) -> VectorStoreFileBatch | None:
        async with self._transaction() as conn:
            if await conn.fetchval(self._sql["VSB_CANCEL"], batch_id, store_id, owner) is None:
                return None
            for row in await conn.fetch(self._sql["VSB_OPEN_FILES"], batch_id):
                file = file_decoder.decode(row[0])
                file.status = "cancelled"
                await self._set_file(conn, file)
                await conn.execute(self._sql["VSC_DROP"], store_id, file.id)
            return await self._batch(conn, owner, store_id, batch_id)

    async def file_counts(self, store_id: str) -> FileCounts:
        return counted([(row[0], row[1]) for row in await self._fetch("VS_COUNTS", store_id)])

    # -- ingestion --------------------------------------------------------------------------------------------------

    async def claim_file(self, lease: str, now: float) -> Claim | None:
        while True:
            async with self._transaction() as conn:
                row = await conn.fetchrow(self._sql["VSF_CLAIMABLE"], now)
                if row is None:
                    return None
                store_id, file_id, owner, attempts, body = row
                file = file_decoder.decode(body)
                await conn.execute(self._sql["VSC_DROP"], store_id, file_id)  # an interrupted attempt's chunks
                if attempts >= MAX_ATTEMPTS:
                    file.status, file.last_error = "failed", interrupted(attempts)
                    await self._set_file(conn, file)
                    continue
                await conn.execute(self._sql["VSF_LEASE"], store_id, file_id, lease, now + LEASE_S)
                return Claim.of(owner, file, lease, attempts + 1)

    async def renew_lease(self, claim: Claim, now: float) -> bool:
        rows = await self._fetch("VSF_RENEW", claim.vector_store_id, claim.file_id, claim.lease, now + LEASE_S)
        return bool(rows)

    async def save_chunks(self, claim: Claim, rows: Sequence[ChunkRow]) -> bool:
        async with self._transaction() as conn:
            if await self._held(conn, claim) is None:
                return False
            await conn.execute(
                self._sql["VSC_INSERT"],
                claim.vector_store_id,
                claim.file_id,
                [row.seq for row in rows],
                [row.start for row in rows],
                [row.end for row in rows],
                [row.text.replace("\x00", "") for row in rows],  # PostgreSQL's text holds no NUL
                [row.vector for row in rows],
                [row.terms for row in rows],
            )
            return True

    async def complete_file(self, claim: Claim, usage_bytes: int, model: str) -> bool:
        async with self._transaction() as conn:
            file = await self._held(conn, claim)
            if file is None:
                if await conn.fetchval(self._sql["VSF_IN_PROGRESS"], claim.vector_store_id, claim.file_id) is None:
                    await conn.execute(self._sql["VSC_DROP"], claim.vector_store_id, claim.file_id)
                return False
            file.status, file.usage_bytes, file.last_error = "completed", usage_bytes, None
            await self._set_file(conn, file)
            await conn.execute(self._sql["VSF_MODEL"], claim.vector_store_id, claim.file_id, model)
            await conn.execute(self._sql["VS_BUMP"], claim.vector_store_id)
            return True

    async def fail_file(self, claim: Claim, error: LastError) -> None:
        async with self._transaction() as conn:
            file = await self._held(conn, claim)
            if file is not None:
                file.status, file.last_error = "failed", error
                await self._set_file(conn, file)
                await conn.execute(self._sql["VSC_DROP"], claim.vector_store_id, claim.file_id)

    # -- search -----------------------------------------------------------------------------------------------------

    async def index_version(self, store_id: str) -> int | None:
        rows = await self._fetch("VS_VERSION", store_id)
        return int(rows[0][0]) if rows else None

    async def stored_files(self, store_id: str) -> list[StoredFile]:
        out = []
        for file_id, file_body, body, lease, model in await self._fetch("VSF_COMPLETED", store_id):
            filename = msgspec.json.decode(file_body)["filename"]
            out.append(StoredFile(file_id, filename, file_decoder.decode(body).attributes, lease or "", model))
        return out

    async def chunk_vectors(self, store_id: str, file_id: str) -> tuple[list[int], bytes, list[bytes]]:
        rows = await self._fetch("VSC_VECTORS", store_id, file_id)
        return [int(row[0]) for row in rows], b"".join(bytes(row[1]) for row in rows), [bytes(row[2]) for row in rows]

    async def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        if not chunk_ids:
            return {}
        return {int(row[0]): row[1] for row in await self._fetch("VSC_TEXTS", list(chunk_ids))}

    async def file_text(self, store_id: str, file_id: str) -> list[tuple[int, int, str]]:
        return [(row[0], row[1], row[2]) for row in await self._fetch("VSC_FILE_TEXT", store_id, file_id)]
