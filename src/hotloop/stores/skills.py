"""What a store keeps for the Skills API: skills, owned by one API key, and their versions, each version's bundle a
zip whose bytes are kept in chunks as the Files API keeps a file's (stores/files.py: the same `file_chunks` table,
keyed by each version's `blob`). SQLite and PostgreSQL keep them; the Redis store keeps none (`SkillsNotKept`).

A skill is its versions and two numbers: its default version (which names and describes it) and the number its next
version gets (versions are numbered 1, 2, … per skill, and a number is never given twice, even after a deletion).
Its latest version is the highest number still there. The default version cannot be deleted, so a skill always has
one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import msgspec

from hotloop.errors import HotloopError
from hotloop.wire.skills import Skill, SkillVersion

Order = Literal["asc", "desc"]
# A version asked for: its number, the skill's default one, or its latest one.
Which = int | Literal["default", "latest"]
# What a change to a skill's versions came to: `done`; `missing`: no such skill of the owner; `no_version`: no such
# version of it; `full`: it holds its most versions already; `default`: the version is the default (not deleted).
Outcome = Literal["done", "missing", "no_version", "full", "default"]


class SkillsNotKept(HotloopError):
    """501: the Redis store keeps no files, so no skills' bundles either."""

    status = 501
    type = "server_error"
    code = "skills_not_supported"

    def __init__(self) -> None:
        super().__init__(
            "This server's store keeps no skills: the Skills API needs the SQLite or PostgreSQL store (store_url)."
        )


class SkillPage(msgspec.Struct):
    data: list[Skill]
    has_more: bool


class VersionPage(msgspec.Struct):
    data: list[SkillVersion]
    has_more: bool


class StoredVersion(msgspec.Struct, frozen=True):
    """A skill version, the key of its zip's bytes in `file_chunks` and their size."""

    version: SkillVersion
    blob: str
    bytes: int


class Changed(msgspec.Struct, frozen=True):
    """A change's outcome and, when `done`, what it made or deleted."""

    outcome: Outcome
    version: SkillVersion | None = None
    skill: Skill | None = None


def skill_of(row: Any) -> Skill:
    """A skill from a store's row: id, created_at, default and latest numbers, name, description."""
    return Skill(
        id=row[0],
        created_at=int(row[1]),
        default_version=str(row[2]),
        latest_version=str(row[3]),
        name=row[4],
        description=row[5],
    )


def stored_of(row: Any) -> StoredVersion:
    """A version from a store's row: id, skill_id, number, created_at, name, description, blob, bytes."""
    version = SkillVersion(
        id=row[0], skill_id=row[1], version=str(row[2]), created_at=int(row[3]), name=row[4], description=row[5]
    )
    return StoredVersion(version, row[6], int(row[7]))


class SkillStore(Protocol):
    """Owner-scoped like responses: another owner's skill reads as missing. Every write stores its zip's bytes first
    and its rows last, in one step: a version is readable whole or not at all, and a refused or failed write leaves
    no bytes behind."""

    async def put_skill(
        self, owner: str, skill_id: str, first: SkillVersion, archive: bytes, max_per_owner: int
    ) -> Skill | None:
        """Insert a new skill with `first` as its version 1 (its default and latest), unless the owner holds
        `max_per_owner` skills already (None: nothing stored)."""
        ...

    async def get_skill(self, owner: str, skill_id: str) -> Skill | None: ...

    async def list_skills(self, owner: str, *, after: str | None, limit: int, order: Order) -> SkillPage:
        """A page by creation time in `order`, after skill id `after` (an unknown id: an empty page)."""
        ...

    async def delete_skill(self, owner: str, skill_id: str) -> bool:
        """Delete it with every version and their bytes; False when it is not there."""
        ...

    async def set_default_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        """Make that version the default: `done` with the skill as it now reads, `missing` or `no_version`."""
        ...

    async def add_skill_version(
        self, owner: str, version: SkillVersion, archive: bytes, *, make_default: bool, max_versions: int
    ) -> Changed:
        """Store a new version of `version.skill_id` (its `version` field is ignored: the skill's next number is
        given): `done` with the version as stored; `missing`, or `full` past `max_versions` versions."""
        ...

    async def get_skill_version(self, owner: str, skill_id: str, which: Which) -> StoredVersion | None:
        """None when the skill is not the owner's, or has no such version."""
        ...

    async def list_skill_versions(
        self, owner: str, skill_id: str, *, after: str | None, limit: int, order: Order
    ) -> VersionPage | None:
        """A page by version number in `order`, after version id `after` (an unknown id: an empty page); None when
        the skill is not the owner's."""
        ...

    async def delete_skill_version(self, owner: str, skill_id: str, which: Which) -> Changed:
        """Delete a version that is not the default, with its bytes: `done` with the version deleted; `missing`,
        `no_version` or `default`."""
        ...

    def skill_version_content(self, blob: str) -> AsyncIterator[bytes]:
        """The zip of a version `get_skill_version` found, chunk by chunk."""
        ...
