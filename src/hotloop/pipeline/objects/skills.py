"""The Skills API (`/v1/skills` and `/versions`, docs/skills.md): a request checked before anything is stored, then
handed to the replica's `Skills` (pipeline/skills/service.py), which the code runtime calls too. Another key's skill
reads as missing (404), never as forbidden."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import BinaryIO

from hotloop.errors import InvalidParam
from hotloop.pipeline.service import Service
from hotloop.stores.skills import Order
from hotloop.wire.lists import Deleted, ObjectList, listed
from hotloop.wire.skills import DeletedVersion, Skill, SkillVersion, UpdateSkill


@dataclass(slots=True)
class Upload:
    """A create's form: the `files` parts (each its filename and spooled bytes), in the order sent, and the version
    create's `default` as sent."""

    parts: list[tuple[str, BinaryIO]] = field(default_factory=list)
    default: str | None = None


def _default(value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise InvalidParam("default must be true or false.", param="default")
    return value.lower() == "true"


# -- skills ---------------------------------------------------------------------------------------------------------


async def create(service: Service, owner: str, upload: Upload) -> Skill:
    bundle, archive = await service.skills.unpack(upload.parts)
    return await service.skills.create(owner, bundle, archive)


async def get(service: Service, owner: str, skill_id: str) -> Skill:
    return await service.skills.get(owner, skill_id)


async def update(service: Service, owner: str, skill_id: str, body: UpdateSkill) -> Skill:
    return await service.skills.set_default(owner, skill_id, body.default_version)


async def delete(service: Service, owner: str, skill_id: str) -> Deleted:
    await service.skills.delete(owner, skill_id)
    return Deleted(id=skill_id, object="skill.deleted")


async def list_skills(service: Service, owner: str, after: str | None, limit: int, order: Order) -> ObjectList:
    page = await service.skills.list_skills(owner, after=after, limit=limit, order=order)
    return listed(page.data, page.has_more)


async def content(service: Service, owner: str, skill_id: str) -> tuple[SkillVersion, int, AsyncIterator[bytes]]:
    """The default version's zip (a missing skill is a 404 before anything is sent)."""
    return await service.skills.content(owner, skill_id, None)


# -- its versions ---------------------------------------------------------------------------------------------------


async def create_version(service: Service, owner: str, skill_id: str, upload: Upload) -> SkillVersion:
    default = _default(upload.default)
    await service.skills.get(owner, skill_id)  # a missing skill is a 404 before its upload is read
    bundle, archive = await service.skills.unpack(upload.parts)
    return await service.skills.add_version(owner, skill_id, bundle, archive, default)


async def get_version(service: Service, owner: str, skill_id: str, version: str) -> SkillVersion:
    return await service.skills.version(owner, skill_id, version)


async def list_versions(
    service: Service, owner: str, skill_id: str, after: str | None, limit: int, order: Order
) -> ObjectList:
    page = await service.skills.list_versions(owner, skill_id, after=after, limit=limit, order=order)
    return listed(page.data, page.has_more)


async def delete_version(service: Service, owner: str, skill_id: str, version: str) -> DeletedVersion:
    deleted = await service.skills.delete_version(owner, skill_id, version)
    return DeletedVersion(id=deleted.id, object="skill.version.deleted", version=deleted.version)


async def version_content(
    service: Service, owner: str, skill_id: str, version: str
) -> tuple[SkillVersion, int, AsyncIterator[bytes]]:
    return await service.skills.content(owner, skill_id, version)
