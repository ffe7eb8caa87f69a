"""What a store keeps for the Conversations API: conversations (id, created_at, metadata) and their ordered items,
owned by one API key. Every store (SQLite, Redis, PostgreSQL) implements it next to the response tables."""

from __future__ import annotations

from typing import Literal, Protocol

from hotloop.stores.pages import ItemPage
from hotloop.wire.conversations import Conversation
from hotloop.wire.items import ContextItem


class ConversationStore(Protocol):
    """Owner-scoped like responses: another owner's conversation reads as missing (None / False)."""

    async def create_conversation(self, owner: str, conversation: Conversation, items: list[ContextItem]) -> None:
        """Insert the conversation with its first items (in order) in one atomic step."""
        ...

    async def get_conversation(self, owner: str, conversation_id: str) -> Conversation | None: ...

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        """Replace its metadata; the updated conversation, or None when unknown."""
        ...

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        """Delete it and all its items."""
        ...

    async def add_conversation_items(self, owner: str, conversation_id: str, items: list[ContextItem]) -> bool:
        """Append items after the last one, atomically (concurrent appends never interleave or share positions);
        False when the conversation is unknown."""
        ...

    async def conversation_items(
        self, owner: str, conversation_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage | None:
        """A page in `order`, starting after item id `after` (an unknown id: an empty page); None when the
        conversation is unknown."""
        ...

    async def conversation_item(self, owner: str, conversation_id: str, item_id: str) -> ContextItem | None: ...

    async def delete_conversation_item(self, owner: str, conversation_id: str, item_id: str) -> bool | None:
        """True when deleted, False when the item is not in it, None when the conversation is unknown."""
        ...

    async def load_conversation(self, owner: str, conversation_id: str) -> list[ContextItem] | None:
        """Every item, oldest first, in one round trip; None when the conversation is unknown."""
        ...
