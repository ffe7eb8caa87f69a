"""The Conversations API's half of the Redis store, on the store's own pool: each method is one command, most of
them a Lua script (redis_lua.py), so an append allocates its positions atomically and a conversation loads in one
round trip."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from hotloop.stores.codec import decode_blob, encode_blob
from hotloop.stores.conversation_codec import (
    conversation_of,
    duplicate_item,
    encode_metadata,
    unique_rows,
)
from hotloop.stores.pages import ItemPage
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import ContextItem

if TYPE_CHECKING:
    from hotloop.stores.health import Health


def _pairs(items: list[ContextItem]) -> list[Any]:
    """(item id or "", one-item blob) per item, flattened into script arguments."""
    args: list[Any] = []
    for row in unique_rows(items):
        args += [row.item_id or "", encode_blob([row])]
    return args


def _item(blob: bytes) -> ContextItem:
    return decode_blob(blob)[0]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisConversations:
    """`ConversationStore` for `RedisStore`, which provides `_run` (a script, health-guarded) and its client."""

    if TYPE_CHECKING:
        prefix: str
        client: Any
        health: Health

        async def _run(self, script: str, *args: Any) -> Any: ...

    async def create_conversation(self, owner: str, conversation: Conversation, items: list[ContextItem]) -> None:
        metadata = encode_metadata(conversation.metadata)
        await self._run(
            "CREATE_CONVERSATION", conversation.id, owner, conversation.created_at, metadata, *_pairs(items)
        )

    async def get_conversation(self, owner: str, conversation_id: str) -> Conversation | None:
        async with self.health.guard():
            found, created_at, metadata = await self.client.hmget(f"{self.prefix}c:{conversation_id}", ["o", "c", "m"])
        if found is None or _text(found) != owner:
            return None
        return conversation_of(conversation_id, int(created_at), metadata)

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        blob = encode_metadata(metadata)
        created_at = await self._run("UPDATE_CONVERSATION", conversation_id, owner, blob)
        return conversation_of(conversation_id, int(created_at), blob) if created_at is not None else None

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        return bool(await self._run("DELETE_CONVERSATION", conversation_id, owner))

    async def add_conversation_items(self, owner: str, conversation_id: str, items: list[ContextItem]) -> bool:
        reply = await self._run("ADD_CONVERSATION_ITEMS", conversation_id, owner, *_pairs(items))
        if isinstance(reply, bytes | str):  # an id already in the conversation: nothing was appended
            raise duplicate_item(_text(reply))
        return bool(reply)

    async def conversation_items(
        self, owner: str, conversation_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        blobs = await self._run("CONVERSATION_ITEMS", conversation_id, owner, after or "", limit + 1, order)
        if blobs is None:
            return None
        return ItemPage(items=[_item(blob) for blob in blobs[:limit]], has_more=len(blobs) > limit)

    async def conversation_item(self, owner: str, conversation_id: str, item_id: str) -> ContextItem | None:
        blob = await self._run("CONVERSATION_ITEM", conversation_id, owner, item_id)
        return _item(blob) if blob is not None else None

    async def delete_conversation_item(self, owner: str, conversation_id: str, item_id: str) -> bool | None:
        reply = int(await self._run("DELETE_CONVERSATION_ITEM", conversation_id, owner, item_id))
        return None if reply < 0 else bool(reply)

    async def load_conversation(self, owner: str, conversation_id: str) -> list[ContextItem] | None:
        blobs = await self._run("LOAD_CONVERSATION", conversation_id, owner)
        return [_item(blob) for blob in blobs] if blobs is not None else None
