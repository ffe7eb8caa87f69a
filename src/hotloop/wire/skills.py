"""The Skills API's wire shapes (OpenAI's skill, its skill version, the update's body and a version's deletion; the
lists and a skill's deletion are wire/lists.py's), no I/O."""

from __future__ import annotations

import msgspec

from hotloop.wire.lists import Deleted

LIST_LIMIT_MAX = 100  # OpenAI's bound for both lists (default 20)


class Skill(msgspec.Struct, kw_only=True):
    """A skill: its name and description are its default version's (its SKILL.md's front matter)."""

    id: str
    created_at: int
    name: str
    description: str
    default_version: str
    latest_version: str
    object: str = "skill"


class SkillVersion(msgspec.Struct, kw_only=True):
    """One immutable upload of a skill; `version` is its number ("1", "2", …, never reused within the skill)."""

    id: str
    skill_id: str
    version: str
    created_at: int
    name: str
    description: str
    object: str = "skill.version"


class DeletedVersion(Deleted, kw_only=True):
    """`{id, object: "skill.version.deleted", deleted: true, version}`: the version's id and its number."""

    version: str


# -- request bodies: unknown fields are refused with a 400 naming them (transports decode with these) -----------------


class UpdateSkill(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`POST /skills/{id}`: which version is the default (a version number, or "latest")."""

    default_version: str
