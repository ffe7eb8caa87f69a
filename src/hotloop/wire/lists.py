"""The shapes the object APIs share (no I/O): a page of objects (OpenAI's `list` with `first_id` / `last_id`) and a
deletion's answer (`{id, object: "<kind>.deleted", deleted: true}`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec


class ObjectList(msgspec.Struct, kw_only=True):
    data: list[Any]
    has_more: bool
    first_id: str | None
    last_id: str | None
    object: str = "list"


class Deleted(msgspec.Struct):
    id: str
    object: str
    deleted: bool = True


def listed(data: Sequence[Any], has_more: bool) -> ObjectList:
    """A page of objects with an `id` each."""
    return ObjectList(
        data=list(data), has_more=has_more, first_id=data[0].id if data else None, last_id=data[-1].id if data else None
    )
