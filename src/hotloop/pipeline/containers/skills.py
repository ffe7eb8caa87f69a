"""A container's skills (docs/skills.md): what a request asked for (skills/requested.py), fetched from the Skills API
or decoded from the request, and checked, when a container is made; and what a hosted shell's model is told of
them.

- **A container keeps its own copy** of each skill's zip, with the name and description it is listed by
  (stores/containers.py `ContainerSkill`): a skill deleted or given a new default version later leaves the
  container as it was made, and any replica can mount it.
- **Checked before anything is stored**: an inline zip is decoded and read (off the event loop: it may be 50 MB) the
  way the Skills API reads an upload (skills/bundle.py); a reference must be the key's own skill and version. Two
  skills of one name are refused (each is a folder named for it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from typing import Protocol

import msgspec

from hotloop.errors import InvalidParam
from hotloop.pipeline.containers.service import Containers
from hotloop.pipeline.tools import ToolSet
from hotloop.skills.bundle import MAX_BYTES, BundleError, from_zip
from hotloop.skills.requested import Inline, Reference, Requested
from hotloop.stores.containers import ContainerSkill
from hotloop.tools import hosted_shell

MAX_TOTAL_BYTES = MAX_BYTES  # a container's skills' zips, all together


class Version(Protocol):
    """What a Skills API version says of itself (wire/skills.py `SkillVersion`)."""

    @property
    def skill_id(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...


class SkillSource(Protocol):
    """The Skills API (pipeline/skills/service.py): a version of one of the owner's skills, with its zip (`bundle`)
    or its zip's size (`sized`); NotFound naming `param` when there is none."""

    async def bundle(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[Version, bytes]: ...

    async def sized(self, owner: str, skill_id: str, version: str | None, param: str) -> tuple[Version, int]: ...


async def resolve(
    source: SkillSource, owner: str, skills: Sequence[Requested], *, zips: bool = True
) -> list[tuple[ContainerSkill, bytes]]:
    """Each skill a container is made with, its zip beside it; a 4xx naming the skill's field when one cannot be
    had (not the owner's, not a zip, no SKILL.md, two of one name, too large together). `zips=False` checks them
    alike without reading a Skills API skill's zip (its bytes then empty; an inline one's are decoded to be
    checked)."""
    resolved: list[tuple[ContainerSkill, bytes]] = []
    names: set[str] = set()
    total = 0
    for skill in skills:
        one = await (_inline(skill) if isinstance(skill, Inline) else _reference(source, owner, skill, zips))
        if one[0].name in names:
            raise InvalidParam(
                f"Two skills are named '{one[0].name}'; each skill is a folder of that name in the container.",
                param=skill.param,
            )
        names.add(one[0].name)
        total += one[0].bytes
        if total > MAX_TOTAL_BYTES:
            raise InvalidParam(
                f"A container's skills hold at most {MAX_TOTAL_BYTES} bytes together.", param=skill.param
            )
        resolved.append(one)
    return resolved


async def _inline(skill: Inline) -> tuple[ContainerSkill, bytes]:
    def read() -> bytes:
        try:
            data = base64.b64decode(skill.data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidParam("'data' is not valid base64.", param=f"{skill.param}.source.data") from None
        try:
            return from_zip(data, named=(skill.name, skill.description)).archive()
        except BundleError as error:
            raise InvalidParam(str(error), param=f"{skill.param}.source.data") from None

    archive = await asyncio.to_thread(read)
    return ContainerSkill(skill.name, skill.description, len(archive)), archive


async def _reference(source: SkillSource, owner: str, skill: Reference, zips: bool) -> tuple[ContainerSkill, bytes]:
    param = f"{skill.param}.skill_id"
    if zips:
        version, archive = await source.bundle(owner, skill.skill_id, skill.version, param)
        size = len(archive)
    else:
        (version, size), archive = await source.sized(owner, skill.skill_id, skill.version, param), b""
    return ContainerSkill(version.name, version.description, size, version.skill_id, version.version), archive


async def described(tools: ToolSet, source: SkillSource, containers: Containers | None, owner: str) -> ToolSet:
    """The tools with a hosted shell's skills listed in its description (once per chain, when its tools are
    resolved: pipeline/prepare.py): `container_auto`'s checked (a 4xx naming the one that cannot be had), a
    `container_reference`'s as that container was made (none when it is gone: its calls say so)."""
    shell = tools.shell
    if shell is None:
        return tools
    if shell.container_id is not None and containers is not None:
        mounted = await containers.listed_skills(owner, shell.container_id)
    else:
        mounted = [skill for skill, _ in await resolve(source, owner, shell.skills, zips=False)]
    if not mounted:
        return tools
    listed = [(skill.name, skill.description) for skill in mounted]
    specs = tuple(
        hosted_shell.with_skills(spec, listed) if spec.kind == hosted_shell.KIND else spec for spec in tools.specs
    )
    return msgspec.structs.replace(tools, specs=specs)
