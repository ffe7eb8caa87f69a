"""The Skills API on the Redis store: refused (501 `skills_not_supported`), as its files are (redis_files.py): a
skill's bundles belong on disk, in SQLite or PostgreSQL (docs/stores.md)."""

from __future__ import annotations

from typing import Any, NoReturn

from hotloop.stores.skills import SkillsNotKept


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise SkillsNotKept()


class RedisSkills:
    put_skill = get_skill = list_skills = delete_skill = set_default_version = _refuse
    add_skill_version = get_skill_version = list_skill_versions = delete_skill_version = _refuse
    skill_version_content = _refuse
