"""The Skills half of the PostgreSQL store (stores/skills.py; SQL in postgres_skill_sql.py). A version's chunks and
its rows go in one transaction, as a Files API file's do (postgres_files.py); the skill's row is held (`FOR UPDATE`)
only at the end, while the version's row is placed, so an upload never blocks the skill's reads. Creates by one owner
queue on an advisory lock, so the per-key bound counts what the previous create left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import asyncpg

from hotloop.ids import new_id
from hotloop.stores.files import chunks_of
from hotloop.stores.health import Health
from hotloop.stores.skills import Changed, Order, SkillPage, StoredVersion, VersionPage, Which, skill_of, stored_of
from hotloop.wire.skills import Skill, SkillVersion


class _Refused(Exception):
    """Rolls a write's transaction back (its chunks with it) and says why."""

    def __init__(self, changed: Changed) -> None:
        self.changed = changed


class PostgresSkills:
    """`SkillStore` for `PostgresStore`, which provides `_fetch`, `_connected`, `health`, `_sql` and PostgresFiles'
    blobs."""

    if TYPE_CHECKING:
        health: Health
        _sql: dict[str, str]

        async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _connected(self) -> asyncpg.Pool: ...

        async def _put_blob(self, conn: Any, key: str, chunks: AsyncIterator[bytes]) -> int: ...

        def _blob_chunks(self, key: str) -> AsyncIterator[bytes]: ...

        def _transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def _find(self, conn: Any, owner: str, skill_id: str, which: Which) -> StoredVersion | None:
        if isinstance(which, int):
            row = await conn.fetchrow(self._sql["SV_NUMBER"], skill_id, owner, which)
        else:
            row = await conn.fetchrow(self._sql[f"SV_{which.upper()}"], skill_id, owner)
        return stored_of(row) if row else None

    async def _insert_version(self, conn: Any, version: SkillVersion, number: int, blob: str, size: int) -> None:
        await conn.execute(
            self._sql["SV_INSERT"],
            version.id,
            version.skill_id,
            number,
            version.created_at,
            version.name,
            version.description,
            blob,
            size,
        )

    async def put_skill(
        self, owner: str, skill_id: str, first: SkillVersion, archive: bytes, max_per_owner: int
    ) -> Skill | None:
        try:
            async with self._transaction() as conn:
                blob = new_id("skblob")
                size = await self._put_blob(conn, blob, chunks_of(archive))
                await conn.execute(self._sql["SK_OWNER_LOCK"], owner)
                if await conn.fetchval(self._sql["SK_COUNT"], owner) >= max_per_owner:
                    raise _Refused(Changed("full"))
                await conn.execute(self._sql["SK_INSERT"], skill_id, owner, first.created_at)
                await self._insert_version(conn, first, 1, blob, size)
                row = await conn.fetchrow(self._sql["SK_GET"], skill_id, owner)
                return skill_of(row)
        except _Refused:
            return None

    async def get_skill(self, owner: str, skill_id: str) -> Skill | None:
        rows = await self._fetch("SK_GET", skill_id, owner)
        return skill_of(rows[0]) if rows else None

    async def list_skills(self, owner: str, *, after: str | None, limit: int, order: Order) -> SkillPage:
        rows = await self._fetch(f"SK_LIST_{order.upper()}", owner, after, limit + 1)
        return SkillPage([skill_of(row) for row in rows[:limit]], len(rows) > limit)

    async def delete_skill(self, owner: str, skill_id: str) -> bool:
        async with self._transaction() as conn:
            if not await conn.fetch(self._sql["SK_DELETE"], skill_id, owner):
                return False
            await conn.execute(self._sql["SK_DROP_VERSIONS"], skill_id)
            return True

    async def set_default_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        async with self._transaction() as conn:
            if await conn.fetchrow(self._sql["SK_HOLD"], skill_id, owner) is None:
                return Changed("missing")
            found = await self._find(conn, owner, skill_id, which)
            if found is None:
                return Changed("no_version")
            await conn.execute(self._sql["SK_SET_DEFAULT"], skill_id, int(found.version.version))
            return Changed("done", found.version, skill_of(await conn.fetchrow(self._sql["SK_GET"], skill_id, owner)))

    async def add_skill_version(
        self, owner: str, version: SkillVersion, archive: bytes, *, make_default: bool, max_versions: int
    ) -> Changed:
        skill_id = version.skill_id
        try:
            async with self._transaction() as conn:
                blob = new_id("skblob")
                size = await self._put_blob(conn, blob, chunks_of(archive))
                held = await conn.fetchrow(self._sql["SK_HOLD"], skill_id, owner)
                if held is None:
                    raise _Refused(Changed("missing"))
                if await conn.fetchval(self._sql["SV_COUNT"], skill_id) >= max_versions:
                    raise _Refused(Changed("full"))
                number = int(held[1])
                await self._insert_version(conn, version, number, blob, size)
                await conn.execute(self._sql["SK_NEXT"], skill_id, number, make_default)
                found = await self._find(conn, owner, skill_id, number)
                return Changed("done", found.version if found else None)
        except _Refused as refused:
            return refused.changed

    async def get_skill_version(self, owner: str, skill_id: str, which: Which) -> StoredVersion | None:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn:
                return await self._find(conn, owner, skill_id, which)

    async def list_skill_versions(
        self, owner: str, skill_id: str, *, after: str | None, limit: int, order: Order
    ) -> VersionPage | None:
        async with self.health.guard():
            pool = await self._connected()
            async with pool.acquire() as conn:
                if not await conn.fetch(self._sql["SK_GET"], skill_id, owner):
                    return None
                rows = await conn.fetch(self._sql[f"SV_LIST_{order.upper()}"], skill_id, after, limit + 1)
        return VersionPage([stored_of(row).version for row in rows[:limit]], len(rows) > limit)

    async def delete_skill_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        async with self._transaction() as conn:
            held = await conn.fetchrow(self._sql["SK_HOLD"], skill_id, owner)
            if held is None:
                return Changed("missing")
            found = await self._find(conn, owner, skill_id, which)
            if found is None:
                return Changed("no_version")
            if int(found.version.version) == held[0]:
                return Changed("default", found.version)
            blob = await conn.fetchval(self._sql["SV_DELETE"], found.version.id)
            await conn.execute(self._sql["SV_DELETE_CHUNKS"], blob)
            return Changed("done", found.version)

    def skill_version_content(self, blob: str) -> AsyncIterator[bytes]:
        return self._blob_chunks(blob)
