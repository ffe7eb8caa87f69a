"""The Conversations API's wire shapes: a conversation object and the bodies of its endpoints."""

from __future__ import annotations

from typing import Any

import msgspec

MAX_ITEMS_PER_CALL = 20  # OpenAI's limit for `items` on create and on add


class Conversation(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    object: str = "conversation"


class DeletedConversation(msgspec.Struct):
    id: str
    deleted: bool = True
    object: str = "conversation.deleted"


class CreateConversation(msgspec.Struct, kw_only=True):
    items: Any = None  # list of input items, validated by the pipeline's normalization
    metadata: Any = None


class UpdateConversation(msgspec.Struct, kw_only=True):
    metadata: Any = msgspec.UNSET


class AddItems(msgspec.Struct, kw_only=True):
    items: Any = msgspec.UNSET


conversation_decoder = msgspec.json.Decoder(Conversation)
