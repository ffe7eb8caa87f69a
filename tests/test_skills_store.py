"""The skills' store contract (stores/skills.py) and the service over it (pipeline/skills/service.py): SQLite and
PostgreSQL keep skills and their versions the same way: owner-scoped; at most so many per owner and versions per
skill; a version's zip in the Files API's chunks, readable whole, gone with its version or its skill; version numbers
never given twice; the default version named by number, "latest" or left out, never deleted; `Skills.bundle` (what
the code runtime calls) answers 404 and 400 naming the param it was given."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hotloop.config import Settings
from hotloop.errors import HotloopError, InvalidParam, NotFound
from hotloop.pipeline.skills import service as skills_service
from hotloop.pipeline.skills.service import Skills
from hotloop.skills.bundle import Bundle, from_files
from hotloop.stores.base import Store
from hotloop.stores.files import CHUNK_BYTES
from hotloop.stores.skills import SkillsNotKept, Which
from hotloop.wire.skills import SkillVersion
from store_support import chunk_rows, opened_store

A, B = "owner-a", "owner-b"
NOW = 1_800_000_000


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


def _version(skill_id: str, name: str = "tool", at: int = NOW) -> SkillVersion:
    return SkillVersion(
        id=f"skillver_{os.urandom(6).hex()}", skill_id=skill_id, version="", created_at=at, name=name, description=name
    )


async def _content(store: Store, owner: str, skill_id: str, which: Which) -> bytes:
    stored = await store.get_skill_version(owner, skill_id, which)
    assert stored is not None
    data = b"".join([chunk async for chunk in store.skill_version_content(stored.blob)])
    assert len(data) == stored.bytes
    return data


async def test_skills_are_owner_scoped_bounded_and_page(store: Store) -> None:
    for n in range(3):
        made = await store.put_skill(A, f"skill_{n}", _version(f"skill_{n}", f"s{n}", NOW + n), b"zip", 3)
        assert made is not None and (made.name, made.default_version, made.latest_version) == (f"s{n}", "1", "1")
    assert await store.put_skill(A, "skill_x", _version("skill_x"), b"zip", 3) is None  # the bound
    assert await store.put_skill(B, "skill_x", _version("skill_x"), b"zip", 3) is not None  # another owner's count
    assert await store.get_skill(B, "skill_0") is None
    assert not await store.delete_skill(B, "skill_0")
    page = await store.list_skills(A, after=None, limit=2, order="desc")
    assert [s.id for s in page.data] == ["skill_2", "skill_1"] and page.has_more
    page = await store.list_skills(A, after="skill_1", limit=2, order="desc")
    assert [s.id for s in page.data] == ["skill_0"] and not page.has_more
    assert [s.id for s in (await store.list_skills(A, after=None, limit=9, order="asc")).data] == [
        "skill_0",
        "skill_1",
        "skill_2",
    ]
    assert (await store.list_skills(A, after="skill_nope", limit=9, order="asc")).data == []
    assert (await store.list_skills(A, after="skill_x", limit=9, order="asc")).data == []  # B's id, not A's
    assert await store.delete_skill(A, "skill_1")
    assert await store.get_skill(A, "skill_1") is None
    assert await store.put_skill(A, "skill_y", _version("skill_y"), b"zip", 3) is not None  # room again
    assert await chunk_rows(store) == 4  # the refused one left nothing, the deleted one's went with it


async def test_versions_are_numbered_once_and_the_default_names_the_skill(store: Store) -> None:
    data = os.urandom(2 * CHUNK_BYTES + 7)
    assert await store.put_skill(A, "skill_a", _version("skill_a", "first"), data, 9) is not None
    second = await store.add_skill_version(A, _version("skill_a", "second"), b"two", make_default=False, max_versions=3)
    assert second.outcome == "done" and second.version is not None and second.version.version == "2"
    skill = await store.get_skill(A, "skill_a")
    assert skill is not None and (skill.name, skill.default_version, skill.latest_version) == ("first", "1", "2")
    third = await store.add_skill_version(A, _version("skill_a", "third"), b"three", make_default=True, max_versions=3)
    assert third.version is not None and third.version.version == "3"
    skill = await store.get_skill(A, "skill_a")
    assert skill is not None and (skill.name, skill.default_version, skill.latest_version) == ("third", "3", "3")
    full = await store.add_skill_version(A, _version("skill_a"), b"four", make_default=False, max_versions=3)
    assert full.outcome == "full"
    assert await _content(store, A, "skill_a", 1) == data
    assert await _content(store, A, "skill_a", "default") == b"three"
    assert await _content(store, A, "skill_a", "latest") == b"three"
    changed = await store.set_default_version(A, "skill_a", 1)
    assert changed.outcome == "done" and changed.skill is not None and changed.skill.name == "first"
    assert (await store.set_default_version(A, "skill_a", 7)).outcome == "no_version"
    assert (await store.set_default_version(B, "skill_a", 1)).outcome == "missing"
    # The default is not deleted; the latest is, and its number is not given again.
    assert (await store.delete_skill_version(A, "skill_a", 1)).outcome == "default"
    assert (await store.delete_skill_version(B, "skill_a", 3)).outcome == "missing"
    gone = await store.delete_skill_version(A, "skill_a", "latest")
    assert gone.outcome == "done" and gone.version is not None and gone.version.version == "3"
    assert (await store.delete_skill_version(A, "skill_a", 3)).outcome == "no_version"
    skill = await store.get_skill(A, "skill_a")
    assert skill is not None and skill.latest_version == "2"
    fourth = await store.add_skill_version(A, _version("skill_a"), b"four", make_default=False, max_versions=3)
    assert fourth.version is not None and fourth.version.version == "4"
    page = await store.list_skill_versions(A, "skill_a", after=None, limit=2, order="asc")
    assert page is not None and [v.version for v in page.data] == ["1", "2"] and page.has_more
    page = await store.list_skill_versions(A, "skill_a", after=page.data[-1].id, limit=2, order="asc")
    assert page is not None and [v.version for v in page.data] == ["4"] and not page.has_more
    page = await store.list_skill_versions(A, "skill_a", after=None, limit=9, order="desc")
    assert page is not None and [v.version for v in page.data] == ["4", "2", "1"]
    assert await store.list_skill_versions(B, "skill_a", after=None, limit=9, order="asc") is None
    assert await store.get_skill_version(B, "skill_a", 1) is None
    assert (await store.add_skill_version(B, _version("skill_a"), b"x", make_default=True, max_versions=9)).outcome == (
        "missing"
    )
    assert await chunk_rows(store) == 3 + 1 + 1  # version 1's three chunks, 2's and 4's; nothing refused stayed
    assert await store.delete_skill(A, "skill_a")
    assert await store.get_skill_version(A, "skill_a", 1) is None
    assert await chunk_rows(store) == 0  # every version's bytes went with the skill


def _archive(name: str = "tool", extra: bytes = b"") -> tuple[Bundle, bytes]:
    manifest = f"---\nname: {name}\ndescription: The {name} skill.\n---\n".encode()
    bundle = from_files([(f"{name}/SKILL.md", manifest), (f"{name}/run.sh", b"#!/bin/sh\n" + extra)])
    return bundle, bundle.archive()


async def test_the_runtime_gets_a_version_and_its_zip(store: Store) -> None:
    skills = Skills(store, Settings(skills_max_per_key=2), clock=lambda: NOW)
    bundle, archive = _archive("tool")
    skill = await skills.create(A, bundle, archive)
    newer, newer_zip = _archive("tool-two", b"echo 2\n")
    await skills.add_version(A, skill.id, newer, newer_zip, default=False)
    version, data = await skills.bundle(A, skill.id, None, "tools[0].environment.skills[0]")
    assert (version.name, version.version, version.skill_id, data) == ("tool", "1", skill.id, archive)
    with zipfile.ZipFile(io.BytesIO(data)) as read:
        assert sorted(read.namelist()) == ["tool/SKILL.md", "tool/run.sh"]
    version, data = await skills.bundle(A, skill.id, "latest", "p")
    assert (version.name, version.version, data) == ("tool-two", "2", newer_zip)
    assert (await skills.bundle(A, skill.id, "1", "p"))[1] == archive
    for owner, skill_id, version_asked, code in (
        (B, skill.id, None, "skill_not_found"),
        (A, "skill_nope", "1", "skill_not_found"),
        (A, skill.id, "3", "skill_version_not_found"),
    ):
        with pytest.raises(NotFound) as missing:
            await skills.bundle(owner, skill_id, version_asked, "p")
        assert (missing.value.code, missing.value.param) == (code, "p")
    for malformed in ("0", "01", "-1", "1.0", "v1", "", "latest ", "1" * 10, "\u0661"):
        with pytest.raises(InvalidParam) as bad:
            await skills.bundle(A, skill.id, malformed, "p")
        assert bad.value.param == "p.version"
    await skills.create(A, bundle, archive)
    with pytest.raises(HotloopError) as limit:
        await skills.create(A, bundle, archive)
    assert (limit.value.status, limit.value.code) == (400, "skills_limit_reached")


async def test_a_skill_holds_so_many_versions(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skills_service, "VERSIONS_MAX", 2)
    skills = Skills(store, Settings())
    bundle, archive = _archive()
    skill = await skills.create(A, bundle, archive)
    await skills.add_version(A, skill.id, bundle, archive, default=True)
    with pytest.raises(HotloopError) as full:
        await skills.add_version(A, skill.id, bundle, archive, default=False)
    assert (full.value.status, full.value.code, full.value.param) == (400, "skill_versions_limit_reached", "files")
    assert (await skills.get(A, skill.id)).latest_version == "2"


async def test_the_redis_store_keeps_no_skills(tmp_path: Path) -> None:
    async with opened_store("redis", tmp_path) as redis:
        with pytest.raises(SkillsNotKept):
            await redis.get_skill(A, "skill_x")
        with pytest.raises(SkillsNotKept):
            await redis.list_skills(A, after=None, limit=1, order="asc")
