"""The Containers API on the Redis store: refused (501 `containers_not_supported`), as its files are
(redis_files.py): a container's files belong on disk, in SQLite or PostgreSQL (docs/stores.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from hotloop.stores.containers import ContainersNotKept


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise ContainersNotKept()


class RedisContainers:
    put_container = get_container = list_containers = delete_container = touch_container = _refuse
    put_container_file = get_container_file = list_container_files = delete_container_file = _refuse
    container_file_content = container_skills = _refuse

    async def expire_containers(self, now: int, limit: int) -> list[str]:
        return []  # it keeps none: the sweep finds nothing to do

    async def live_containers(self, container_ids: Sequence[str], now: int) -> set[str]:
        return set()
