"""`Skills`: a replica's skills — the Skills API's operations on the store with their bounds, and what the code
runtime calls to mount one in a container.

Every operation is owner-scoped (the API key's owner tag, `Session.owner`): a skill that is not the owner's, or was
deleted, raises `NotFound` (404 `skill_not_found`), as if it never was. What the runtime calls:

    version, archive = await skills.bundle(owner, skill_id, None, "skills[0]")   # the default version's zip
    version, archive = await skills.bundle(owner, skill_id, "latest", param)     # the latest; or "2", …

`version` is a wire `SkillVersion` (its `name`, `description`, `skill_id`, `version`), `archive` the zip
(`Bundle.archive()`'s bytes, whole). A missing skill or version is a 404 naming `param`; a version that is neither
"latest" nor a positive integer is a 400 naming `param + ".version"`.

A bundle is read off the event loop (`unpack`: it may be a 50 MB zip), at most `UNPACKING` at once per worker.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import BinaryIO

from hotloop.config import Settings
from hotloop.errors import HotloopError, InvalidParam, NotFound
from hotloop.ids import new_id
from hotloop.skills.bundle import Bundle, BundleError
from hotloop.skills.upload import from_upload
from hotloop.stores.base import Store
from hotloop.stores.skills import Changed, Order, SkillPage, StoredVersion, VersionPage, Which
from hotloop.wire.skills import Skill, SkillVersion

VERSIONS_MAX = 1000  # versions one skill holds at once (deleted ones do not count)
UNPACKING = 2  # bundles read at once per worker: each may hold some 150 MB (sent, unpacked, zipped again)
NUMBER = re.compile(r"[1-9][0-9]{0,8}")  # a version's number as a client writes it (skills/requested.py's too)


def missing_skill(skill_id: str, param: str = "skill_id") -> NotFound:
    return NotFound(f"No skill found with id '{skill_id}'.", param=param, code="skill_not_found")


def missing_version(skill_id: str, version: str, param: str = "version") -> NotFound:
    return NotFound(f"The skill '{skill_id}' has no version '{version}'.", param=param, code="skill_version_not_found")


def known(skill_id: str, param: str = "skill_id") -> str:
    """The id, or a 404 for one that no skill can have: none of ours holds a NUL (nor can PostgreSQL's text), so
    such an id is missing, not the store's error."""
    if "\x00" in skill_id:
        raise missing_skill(skill_id.replace("\x00", "\\0"), param)
    return skill_id


def which(version: str, param: str) -> Which:
    """A version as a client names it: "latest", or its number ("1", "2", …); a 400 naming `param` otherwise."""
    if version == "latest":
        return "latest"
    if not NUMBER.fullmatch(version):
        raise InvalidParam(f"'{version}' is not a skill version: give its number (1, 2, …) or 'latest'.", param=param)
    return int(version)


def _read(parts: Sequence[tuple[str, BinaryIO]]) -> tuple[Bundle, bytes]:
    """The bundle of an upload's parts and its zip (on a worker thread); a 400 naming `files` when it is none."""
    sent = []
    for name, content in parts:
        content.seek(0)
        sent.append((name, content.read()))
    try:
        bundle = from_upload(sent)
    except BundleError as error:
        raise InvalidParam(str(error), param="files") from None
    return bundle, bundle.archive()


class Skills:
    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._unpacking = asyncio.Semaphore(UNPACKING)

    def _now(self) -> int:
        return int(self.clock())

    async def unpack(self, parts: Sequence[tuple[str, BinaryIO]]) -> tuple[Bundle, bytes]:
        """An upload's `files` parts (each its filename and spooled bytes) as a bundle and its zip, read off the
        event loop; a 400 naming `files` when they make none (bundle.py says why)."""
        async with self._unpacking:
            return await asyncio.to_thread(_read, parts)

    def _version(self, skill_id: str, bundle: Bundle) -> SkillVersion:
        return SkillVersion(
            id=new_id("skillver"),
            skill_id=skill_id,
            version="",  # the store numbers it
            created_at=self._now(),
            name=bundle.name,
            description=bundle.description,
        )

    # -- skills -------------------------------------------------------------------------------------------------

    async def create(self, owner: str, bundle: Bundle, archive: bytes) -> Skill:
        """A new skill whose version 1 (its default and latest) is this bundle. Past `skills_max_per_key` skills:
        400 `skills_limit_reached`, nothing stored."""
        skill_id = new_id("skill")
        first = self._version(skill_id, bundle)
        limit = self.settings.skills_max_per_key
        made = await self.store.put_skill(owner, skill_id, first, archive, limit)
        if made is None:
            raise HotloopError(
                f"This key holds {limit} skills already (skills_max_per_key): delete one first.",
                param="files",
                code="skills_limit_reached",
            )
        return made

    async def get(self, owner: str, skill_id: str, param: str = "skill_id") -> Skill:
        found = await self.store.get_skill(owner, known(skill_id, param))
        if found is None:
            raise missing_skill(skill_id, param)
        return found

    async def list_skills(self, owner: str, *, after: str | None, limit: int, order: Order) -> SkillPage:
        if after is not None and "\x00" in after:  # an id no skill has: as an unknown one, an empty page
            return SkillPage([], False)
        return await self.store.list_skills(owner, after=after, limit=limit, order=order)

    async def set_default(self, owner: str, skill_id: str, version: str) -> Skill:
        """Make `version` (a number, or "latest") the default: the skill is named and described by it now."""
        changed = await self.store.set_default_version(owner, known(skill_id), which(version, "default_version"))
        if changed.outcome == "missing":
            raise missing_skill(skill_id)
        if changed.outcome == "no_version" or changed.skill is None:
            raise missing_version(skill_id, version, "default_version")
        return changed.skill

    async def delete(self, owner: str, skill_id: str) -> None:
        """Delete it with every version and their zips."""
        if not await self.store.delete_skill(owner, known(skill_id)):
            raise missing_skill(skill_id)

    # -- its versions -------------------------------------------------------------------------------------------

    async def add_version(
        self, owner: str, skill_id: str, bundle: Bundle, archive: bytes, default: bool
    ) -> SkillVersion:
        """The skill's next version (its latest); its default too when `default`. Past `VERSIONS_MAX` versions: 400
        `skill_versions_limit_reached`, nothing stored."""
        version = self._version(known(skill_id), bundle)
        changed = await self.store.add_skill_version(
            owner, version, archive, make_default=default, max_versions=VERSIONS_MAX
        )
        return _done(changed, skill_id, "")

    async def version(self, owner: str, skill_id: str, version: str) -> SkillVersion:
        return (await self._stored(owner, skill_id, version, "version")).version

    async def list_versions(
        self, owner: str, skill_id: str, *, after: str | None, limit: int, order: Order
    ) -> VersionPage:
        if after is not None and "\x00" in after:  # an id no version has: as an unknown one, an empty page
            await self.get(owner, skill_id)
            return VersionPage([], False)
        page = await self.store.list_skill_versions(owner, known(skill_id), after=after, limit=limit, order=order)
        if page is None:
            raise missing_skill(skill_id)
        return page

    async def delete_version(self, owner: str, skill_id: str, version: str) -> SkillVersion:
        """Delete a version with its zip; the default version is not deleted (400 naming `version`: make another
        the default first, or delete the skill). The version deleted."""
        changed = await self.store.delete_skill_version(owner, known(skill_id), which(version, "version"))
        return _done(changed, skill_id, version)

    async def content(
        self, owner: str, skill_id: str, version: str | None
    ) -> tuple[SkillVersion, int, AsyncIterator[bytes]]:
        """A version (None: the default one), its zip's size and its bytes chunk by chunk (a missing one is a 404
        before any is read)."""
        stored = await self._stored(owner, skill_id, version, "version")
        return stored.version, stored.bytes, self.store.skill_version_content(stored.blob)

    async def bundle(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[SkillVersion, bytes]:
        """A version of one of the owner's skills (None: its default, "latest": its latest, else its number) and its
        zip, whole: 404 naming `param` when the skill or the version is not there, 400 naming `param + ".version"`
        for a malformed version."""
        stored = await self._reference(owner, skill_id, version, param)
        archive = b"".join([chunk async for chunk in self.store.skill_version_content(stored.blob)])
        if len(archive) != stored.bytes:  # deleted while it was read
            raise missing_version(skill_id, version or stored.version.version, param)
        return stored.version, archive

    async def sized(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[SkillVersion, int]:
        """As `bundle`, without reading the zip: the version and its zip's size (a container's skills checked
        before it is made, once per chain)."""
        stored = await self._reference(owner, skill_id, version, param)
        return stored.version, stored.bytes

    async def _reference(self, owner: str, skill_id: str, version: str | None, param: str) -> StoredVersion:
        return await self._stored(owner, skill_id, version, param + ".version", missing_param=param)

    async def _stored(
        self, owner: str, skill_id: str, version: str | None, param: str, *, missing_param: str | None = None
    ) -> StoredVersion:
        """The version asked for: 404 naming `missing_param` (by default: `skill_id`, then `param`) when the skill or
        the version is not there."""
        asked = "default" if version is None else which(version, param)
        stored = await self.store.get_skill_version(owner, known(skill_id, missing_param or "skill_id"), asked)
        if stored is None:
            await self.get(owner, skill_id, missing_param or "skill_id")  # 404 for the skill before its version
            raise missing_version(skill_id, version or "default", missing_param or param)
        return stored


def _done(changed: Changed, skill_id: str, version: str) -> SkillVersion:
    """The version a change made or deleted, or the error its outcome is."""
    match changed.outcome:
        case "done" if changed.version is not None:
            return changed.version
        case "missing":
            raise missing_skill(skill_id)
        case "full":
            raise HotloopError(
                f"The skill holds {VERSIONS_MAX} versions already: delete one first.",
                param="files",
                code="skill_versions_limit_reached",
            )
        case "default":
            raise InvalidParam(
                f"Version {version} is the skill's default_version and cannot be deleted: make another version the "
                f"default first (POST /v1/skills/{skill_id} with default_version), or delete the skill.",
                param="version",
                code="default_version_in_use",
            )
        case _:
            raise missing_version(skill_id, version)
