"""The Skills half of the SQLite store (stores/skills.py). A version's zip goes to `file_chunks` a chunk a step, as a
Files API file's does (sqlite_files.py); its rows come last, in one step that checks the skill is still there and
its bounds, so a version is readable whole or not at all."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

from hotloop.ids import new_id
from hotloop.stores.files import chunks_of
from hotloop.stores.skills import Changed, Order, SkillPage, StoredVersion, VersionPage, Which, skill_of, stored_of
from hotloop.stores.sqlite_files import delete_chunks
from hotloop.wire.skills import Skill, SkillVersion

T = TypeVar("T")
SKILL_SCHEMA = """
CREATE TABLE IF NOT EXISTS skills (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    default_version INTEGER NOT NULL,
    next_version INTEGER NOT NULL  -- the number the next version gets: numbers are never given twice
);
CREATE INDEX IF NOT EXISTS skills_by_owner ON skills (owner, created_at, id);
CREATE TABLE IF NOT EXISTS skill_versions (
    id TEXT PRIMARY KEY,
    skill_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    blob TEXT NOT NULL,  -- the key of its zip's bytes in file_chunks
    bytes INTEGER NOT NULL,
    UNIQUE (skill_id, version)
);
"""
# A skill reads as its row, its latest number and its default version's name and description.
_SKILLS = """
SELECT s.id, s.created_at, s.default_version,
    (SELECT MAX(l.version) FROM skill_versions l WHERE l.skill_id = s.id), v.name, v.description
FROM skills s JOIN skill_versions v ON v.skill_id = s.id AND v.version = s.default_version
"""
_SKILL = _SKILLS + " WHERE s.id = ? AND s.owner = ?"
# ?1 owner, ?2 `after` (NULL: from the start; unknown: an empty page), ?3 rows.
_SKILL_PAGE = (
    _SKILLS
    + """ WHERE s.owner = ?1
AND (?2 IS NULL OR (s.created_at, s.id) {op} (SELECT created_at, id FROM skills WHERE id = ?2 AND owner = ?1))
ORDER BY s.created_at {direction}, s.id {direction} LIMIT ?3"""
)
_COLUMNS = "v.id, v.skill_id, v.version, v.created_at, v.name, v.description, v.blob, v.bytes"
_OWNED = f"SELECT {_COLUMNS} FROM skill_versions v JOIN skills s ON s.id = v.skill_id WHERE s.id = ? AND s.owner = ?"
_VERSION = {
    "number": _OWNED + " AND v.version = ?",
    "default": _OWNED + " AND v.version = s.default_version",
    "latest": _OWNED + " ORDER BY v.version DESC LIMIT 1",
}
# ?1 skill, ?2 `after` (a version id), ?3 rows.
_VERSION_PAGE = f"""
SELECT {_COLUMNS} FROM skill_versions v WHERE v.skill_id = ?1
AND (?2 IS NULL OR v.version {{op}} (SELECT version FROM skill_versions WHERE id = ?2 AND skill_id = ?1))
ORDER BY v.version {{direction}} LIMIT ?3
"""
_PAGES = {
    order: (_SKILL_PAGE.format(op=op, direction=direction), _VERSION_PAGE.format(op=op, direction=direction))
    for order, op, direction in (("asc", ">", "ASC"), ("desc", "<", "DESC"))
}
_OWNER = "SELECT next_version FROM skills WHERE id = ? AND owner = ?"


def _find(conn: sqlite3.Connection, owner: str, skill_id: str, which: Which) -> StoredVersion | None:
    if isinstance(which, int):
        row = conn.execute(_VERSION["number"], (skill_id, owner, which)).fetchone()
    else:
        row = conn.execute(_VERSION[which], (skill_id, owner)).fetchone()
    return stored_of(row) if row else None


def _skill(conn: sqlite3.Connection, owner: str, skill_id: str) -> Skill | None:
    row = conn.execute(_SKILL, (skill_id, owner)).fetchone()
    return skill_of(row) if row else None


def _insert_version(conn: sqlite3.Connection, version: SkillVersion, number: int, blob: str, size: int) -> None:
    conn.execute(
        "INSERT INTO skill_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (version.id, version.skill_id, number, version.created_at, version.name, version.description, blob, size),
    )


class SQLiteSkills:
    """`SkillStore` for `SQLiteStore`, which provides `_read` and `_write`, and SQLiteFiles' blobs."""

    if TYPE_CHECKING:

        async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _put_blob(self, key: str, chunks: AsyncIterator[bytes]) -> int: ...

        def _blob_chunks(self, key: str) -> AsyncIterator[bytes]: ...

    async def _with_blob(self, archive: bytes, place: Callable[[str, int], Callable[[sqlite3.Connection], T]]) -> T:
        """Write the zip's chunks, then its rows in one step (`place(blob, size)`); the chunks are deleted again
        unless that step stored them (a skill, or a change `done`)."""
        blob = new_id("skblob")
        kept = False
        try:
            size = await self._put_blob(blob, chunks_of(archive))
            result = await self._write(place(blob, size))
            kept = isinstance(result, Skill) or (isinstance(result, Changed) and result.outcome == "done")
            return result
        finally:
            if not kept:  # refused, or failed (a cancel included)
                await asyncio.shield(self._write(delete_chunks(blob)))

    async def put_skill(
        self, owner: str, skill_id: str, first: SkillVersion, archive: bytes, max_per_owner: int
    ) -> Skill | None:
        def place(blob: str, size: int) -> Callable[[sqlite3.Connection], Skill | None]:
            def work(conn: sqlite3.Connection) -> Skill | None:
                held = conn.execute("SELECT COUNT(*) FROM skills WHERE owner = ?", (owner,)).fetchone()[0]
                if held >= max_per_owner:
                    return None
                conn.execute("INSERT INTO skills VALUES (?, ?, ?, 1, 2)", (skill_id, owner, first.created_at))
                _insert_version(conn, first, 1, blob, size)
                return _skill(conn, owner, skill_id)

            return work

        return await self._with_blob(archive, place)

    async def get_skill(self, owner: str, skill_id: str) -> Skill | None:
        return await self._read(lambda conn: _skill(conn, owner, skill_id))

    async def list_skills(self, owner: str, *, after: str | None, limit: int, order: Order) -> SkillPage:
        def work(conn: sqlite3.Connection) -> list[Skill]:
            return [skill_of(row) for row in conn.execute(_PAGES[order][0], (owner, after, limit + 1))]

        found = await self._read(work)
        return SkillPage(found[:limit], len(found) > limit)

    async def delete_skill(self, owner: str, skill_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            found = conn.execute("DELETE FROM skills WHERE id = ? AND owner = ? RETURNING 1", (skill_id, owner))
            if found.fetchone() is None:
                return False
            blobs = conn.execute("DELETE FROM skill_versions WHERE skill_id = ? RETURNING blob", (skill_id,))
            conn.executemany("DELETE FROM file_chunks WHERE file_id = ?", blobs.fetchall())
            return True

        return await self._write(work)

    async def set_default_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        def work(conn: sqlite3.Connection) -> Changed:
            if conn.execute(_OWNER, (skill_id, owner)).fetchone() is None:
                return Changed("missing")
            found = _find(conn, owner, skill_id, which)
            if found is None:
                return Changed("no_version")
            number = int(found.version.version)
            conn.execute("UPDATE skills SET default_version = ? WHERE id = ?", (number, skill_id))
            return Changed("done", found.version, _skill(conn, owner, skill_id))

        return await self._write(work)

    async def add_skill_version(
        self, owner: str, version: SkillVersion, archive: bytes, *, make_default: bool, max_versions: int
    ) -> Changed:
        skill_id = version.skill_id

        def place(blob: str, size: int) -> Callable[[sqlite3.Connection], Changed]:
            def work(conn: sqlite3.Connection) -> Changed:
                row = conn.execute(_OWNER, (skill_id, owner)).fetchone()
                if row is None:
                    return Changed("missing")
                held = conn.execute("SELECT COUNT(*) FROM skill_versions WHERE skill_id = ?", (skill_id,))
                if held.fetchone()[0] >= max_versions:
                    return Changed("full")
                number = int(row[0])
                _insert_version(conn, version, number, blob, size)
                conn.execute(
                    "UPDATE skills SET next_version = ?2 + 1,"
                    " default_version = CASE WHEN ?3 THEN ?2 ELSE default_version END WHERE id = ?1",
                    (skill_id, number, make_default),
                )
                found = _find(conn, owner, skill_id, number)
                return Changed("done", found.version if found else None)

            return work

        return await self._with_blob(archive, place)

    async def get_skill_version(self, owner: str, skill_id: str, which: Which) -> StoredVersion | None:
        return await self._read(lambda conn: _find(conn, owner, skill_id, which))

    async def list_skill_versions(
        self, owner: str, skill_id: str, *, after: str | None, limit: int, order: Order
    ) -> VersionPage | None:
        def work(conn: sqlite3.Connection) -> list[SkillVersion] | None:
            if conn.execute(_OWNER, (skill_id, owner)).fetchone() is None:
                return None
            rows = conn.execute(_PAGES[order][1], (skill_id, after, limit + 1))
            return [stored_of(row).version for row in rows]

        found = await self._read(work)
        return None if found is None else VersionPage(found[:limit], len(found) > limit)

    async def delete_skill_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        def work(conn: sqlite3.Connection) -> Changed:
            row = conn.execute("SELECT default_version FROM skills WHERE id = ? AND owner = ?", (skill_id, owner))
            default = row.fetchone()
            if default is None:
                return Changed("missing")
            found = _find(conn, owner, skill_id, which)
            if found is None:
                return Changed("no_version")
            if int(found.version.version) == default[0]:
                return Changed("default", found.version)
            conn.execute("DELETE FROM skill_versions WHERE id = ?", (found.version.id,))
            conn.execute("DELETE FROM file_chunks WHERE file_id = ?", (found.blob,))
            return Changed("done", found.version)

        return await self._write(work)

    def skill_version_content(self, blob: str) -> AsyncIterator[bytes]:
        return self._blob_chunks(blob)
