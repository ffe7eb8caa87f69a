"""The Conversations API's half of the PostgreSQL store, on the store's own pool: every method is one statement
(postgres_sql.py), so each is atomic and one round trip."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

import asyncpg

from hotloop.stores.codec import ItemRow, decode_item
from hotloop.stores.conversation_codec import (
    conversation_of,
    duplicate_item,
    encode_metadata,
    page_of,
    unique_rows,
)
from hotloop.stores.pages import ItemPage
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import ContextItem

# "Key (conversation_id, item_id)=(conv_…, msg_…) already exists." — conversation ids never hold ", ".
_TAKEN = re.compile(r"=\([^,]*, (.*)\) already exists")


def _columns(rows: list[ItemRow]) -> tuple[list[str | None], list[str], list[bytes]]:
    return [row.item_id for row in rows], [row.type for row in rows], [row.body for row in rows]


def _duplicate(exc: asyncpg.UniqueViolationError) -> Exception:
    found = _TAKEN.search(getattr(exc, "detail", "") or "")
    return duplicate_item(found.group(1) if found else "?")


class PostgresConversations:
    """`ConversationStore` for `PostgresStore`, which provides `_fetch` (one statement, health-guarded)."""

    if TYPE_CHECKING:

        async def _fetch(self, name: str, *args: Any) -> list[asyncpg.Record]: ...

    async def create_conversation(self, owner: str, conversation: Conversation, items: list[ContextItem]) -> None:
        rows = unique_rows(items)
        metadata = encode_metadata(conversation.metadata)
        await self._fetch(
            "CREATE_CONVERSATION", conversation.id, owner, conversation.created_at, metadata, *_columns(rows)
        )

    async def get_conversation(self, owner: str, conversation_id: str) -> Conversation | None:
        rows = await self._fetch("GET_CONVERSATION", conversation_id, owner)
        return conversation_of(conversation_id, rows[0][0], rows[0][1]) if rows else None

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        blob = encode_metadata(metadata)
        rows = await self._fetch("UPDATE_CONVERSATION", conversation_id, owner, blob)
        return conversation_of(conversation_id, rows[0][0], blob) if rows else None

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        return bool(await self._fetch("DELETE_CONVERSATION", conversation_id, owner))  # items go by cascade

    async def add_conversation_items(self, owner: str, conversation_id: str, items: list[ContextItem]) -> bool:
        rows = unique_rows(items)
        try:
            found = await self._fetch("APPEND_CONVERSATION_ITEMS", conversation_id, owner, *_columns(rows))
        except asyncpg.UniqueViolationError as exc:  # the statement failed as a whole: nothing appended
            raise _duplicate(exc) from None
        return bool(found)

    async def conversation_items(
        self, owner: str, conversation_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        name = "CONVERSATION_ITEMS_ASC" if order == "asc" else "CONVERSATION_ITEMS_DESC"
        rows = await self._fetch(name, conversation_id, owner, after, limit + 1)
        if not rows:
            return None
        return page_of(((row[0], row[1]) for row in rows if row[0] is not None), limit)

    async def conversation_item(self, owner: str, conversation_id: str, item_id: str) -> ContextItem | None:
        rows = await self._fetch("CONVERSATION_ITEM", conversation_id, owner, item_id)
        return decode_item(rows[0][0], rows[0][1]) if rows else None

    async def delete_conversation_item(self, owner: str, conversation_id: str, item_id: str) -> bool | None:
        rows = await self._fetch("DELETE_CONVERSATION_ITEM", conversation_id, owner, item_id)
        return bool(rows[0][0]) if rows else None

    async def load_conversation(self, owner: str, conversation_id: str) -> list[ContextItem] | None:
        rows = await self._fetch("LOAD_CONVERSATION", conversation_id, owner)
        if not rows:
            return None
        return [decode_item(row[0], row[1]) for row in rows if row[0] is not None]
