"""The skills a request asks a container for (docs/skills.md): a hosted shell's `environment.skills`
(tools/hosted_shell.py) or a Containers API create's `skills`, checked for shape at the door, no I/O. Each is a
Skills API skill (`{type: "skill_reference", skill_id, version?}`) or an inline bundle (`{type: "inline", name,
description, source: {type: "base64", media_type: "application/zip", data}}`); pipeline/containers/skills.py
fetches or decodes them when a container is made."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hotloop.errors import InvalidParam
from hotloop.skills.bundle import MAX_DESCRIPTION, MAX_NAME, MAX_ZIP_BYTES, NAME

REFERENCE, INLINE = "skill_reference", "inline"
MAX_SKILLS = 20  # a container's skills: each one a read-only mount, each named in the tool's description
VERSION = re.compile(r"[1-9][0-9]{0,8}|latest")
REFERENCE_FIELDS = frozenset({"type", "skill_id", "version"})
INLINE_FIELDS = frozenset({"type", "name", "description", "source"})
SOURCE_FIELDS = frozenset({"type", "media_type", "data"})
MAX_BASE64 = (MAX_ZIP_BYTES + 2) // 3 * 4


class Reference(msgspec.Struct, frozen=True):
    """A Skills API skill: `version` None is its default version, "latest" its newest, else that version."""

    param: str  # where the request named it (`tools[0].environment.skills[1]`)
    skill_id: str
    version: str | None = None


class Inline(msgspec.Struct, frozen=True):
    param: str
    name: str
    description: str
    data: str  # the zip, base64 (decoded off the event loop, when the container is made)


Requested = Reference | Inline


def requested(raw: Any, where: str) -> tuple[Requested, ...]:
    """The skills of a `skills` field (`where`: its param), checked for shape; a 400 naming the field that is
    wrong. None or [] asks for none."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidParam("'skills' must be a list of skills.", param=where, code="invalid_type")
    if len(raw) > MAX_SKILLS:
        raise InvalidParam(f"'skills' may list at most {MAX_SKILLS} skills.", param=where)
    return tuple(_one(skill, f"{where}[{n}]") for n, skill in enumerate(raw))


def _one(raw: Any, param: str) -> Requested:
    if not isinstance(raw, dict):
        raise InvalidParam("Each skill must be an object.", param=param, code="invalid_type")
    kind = raw.get("type")
    if kind == REFERENCE:
        _known(raw, REFERENCE_FIELDS, param)
        skill_id = raw.get("skill_id")
        if not isinstance(skill_id, str) or not skill_id:
            raise InvalidParam("'skill_id' must be a skill's id.", param=f"{param}.skill_id", code="invalid_type")
        version = raw.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        if version is not None and (not isinstance(version, str) or not VERSION.fullmatch(version)):
            raise InvalidParam(
                "'version' must be a positive integer or 'latest' (or left out: the skill's default version).",
                param=f"{param}.version",
            )
        return Reference(param, skill_id, version)
    if kind == INLINE:
        _known(raw, INLINE_FIELDS, param)
        name, description = raw.get("name"), raw.get("description")
        if not isinstance(name, str) or len(name) > MAX_NAME or not NAME.fullmatch(name):
            raise InvalidParam(
                f"'name' must be 1-{MAX_NAME} lowercase letters, digits and single hyphens (it names the skill's "
                "folder in the container).",
                param=f"{param}.name",
            )
        if not isinstance(description, str) or not 0 < len(description) <= MAX_DESCRIPTION:
            raise InvalidParam(f"'description' must be 1-{MAX_DESCRIPTION} characters.", param=f"{param}.description")
        return Inline(param, name, description, _source(raw.get("source"), f"{param}.source"))
    raise InvalidParam(
        f"A skill's 'type' must be '{REFERENCE}' or '{INLINE}'.",
        param=f"{param}.type",
        code="invalid_value" if isinstance(kind, str) else "invalid_type",
    )


def _source(source: Any, param: str) -> str:
    if not isinstance(source, dict):
        raise InvalidParam("'source' must be an object.", param=param, code="invalid_type")
    _known(source, SOURCE_FIELDS, param)
    if source.get("type") != "base64":
        raise InvalidParam("An inline skill's 'source.type' must be 'base64'.", param=f"{param}.type")
    if source.get("media_type") != "application/zip":
        raise InvalidParam("An inline skill's 'media_type' must be 'application/zip'.", param=f"{param}.media_type")
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise InvalidParam("'data' must be the zip, base64-encoded.", param=f"{param}.data", code="invalid_type")
    if len(data) > MAX_BASE64:
        raise InvalidParam(f"An inline skill's zip holds at most {MAX_ZIP_BYTES} bytes.", param=f"{param}.data")
    return data


def _known(raw: dict[str, Any], fields: frozenset[str], param: str) -> None:
    for key in raw:
        if key not in fields:
            raise InvalidParam(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
