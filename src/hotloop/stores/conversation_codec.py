"""What the three stores share for conversations: metadata as JSON, items as codec rows, and the rule that an item
id appears at most once in a conversation (the id addresses the item: retrieve, delete, `after`)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from hotloop.errors import InvalidParam
from hotloop.stores.codec import ItemRow, decode_item, encode, item_rows
from hotloop.stores.pages import ItemPage
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import ContextItem

_metadata_decoder = msgspec.json.Decoder(dict[str, str])


def encode_metadata(metadata: dict[str, str]) -> bytes:
    return encode(metadata)


def conversation_of(conversation_id: str, created_at: int, metadata: bytes) -> Conversation:
    return Conversation(id=conversation_id, created_at=int(created_at), metadata=_metadata_decoder.decode(metadata))


def duplicate_item(item_id: str) -> InvalidParam:
    return InvalidParam(
        f"Item id '{item_id}' is used more than once in the conversation.", param="items", code="duplicate_item"
    )


def unique_rows(items: list[ContextItem]) -> list[ItemRow]:
    """The items as rows; raises `InvalidParam` when two of them share an id (the store checks stored ones)."""
    rows = item_rows(items)
    seen: set[str] = set()
    for row in rows:
        if row.item_id is not None:
            if row.item_id in seen:
                raise duplicate_item(row.item_id)
            seen.add(row.item_id)
    return rows


def page_of(rows: Iterable[tuple[str, bytes]], limit: int) -> ItemPage:
    """A page from up to `limit + 1` (type, body) rows: the extra one only says there is more."""
    found = list(rows)
    return ItemPage(
        items=[decode_item(type_name, body) for type_name, body in found[:limit]], has_more=len(found) > limit
    )
