"""The Conversations API (`/v1/conversations`): a stored, owner-scoped list of items that a response reads as its
context (pipeline/prior.py `Conversation`) and extends with its input and output once it has finished.

Unlike a `previous_response_id` chain, a conversation can be edited (items added or deleted), so its context is
read from the store every turn, in one round trip, and rendered through the content-addressed token cache.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from hotloop.errors import InvalidParam, MissingParam, NotFound
from hotloop.ids import new_id
from hotloop.pipeline.normalize import normalize_item
from hotloop.pipeline.objects.responses import ItemList, item_list
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.validate import check_metadata
from hotloop.wire.conversations import (
    MAX_ITEMS_PER_CALL,
    AddItems,
    Conversation,
    CreateConversation,
    DeletedConversation,
    UpdateConversation,
)
from hotloop.wire.included import NOTHING, Shown, hide
from hotloop.wire.items import ContextItem, ItemReference, item_to_builtins
from hotloop.wire.request import decode_body

_create = msgspec.json.Decoder(CreateConversation)
_update = msgspec.json.Decoder(UpdateConversation)
_add = msgspec.json.Decoder(AddItems)


def _not_found(conversation_id: str) -> NotFound:
    return NotFound(
        f"Conversation with id '{conversation_id}' not found.", param="conversation_id", code="conversation_not_found"
    )


def _items(raw: Any, param: str = "items") -> list[ContextItem]:
    if not isinstance(raw, list):
        raise InvalidParam(f"'{param}' must be an array of items.", param=param, code="invalid_type")
    if len(raw) > MAX_ITEMS_PER_CALL:
        raise InvalidParam(f"'{param}' holds at most {MAX_ITEMS_PER_CALL} items per call.", param=param)
    items: list[ContextItem] = []
    for index, entry in enumerate(raw):
        item = normalize_item(entry, f"{param}[{index}]")
        if isinstance(item, ItemReference):
            raise InvalidParam("Item references cannot be stored in a conversation.", param=f"{param}[{index}]")
        items.append(item)
    return items


def _metadata(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidParam("metadata must be an object of strings.", param="metadata", code="invalid_type")
    check_metadata(raw)
    return dict(raw)


async def create(service: Service, session: Session, body: bytes) -> Conversation:
    request: CreateConversation = decode_body(_create, body or b"{}")
    items = _items(request.items) if request.items is not None else []
    conversation = Conversation(id=new_id("conv"), created_at=int(time.time()), metadata=_metadata(request.metadata))
    await service.store.create_conversation(session.owner, conversation, items)
    return conversation


async def get(service: Service, session: Session, conversation_id: str) -> Conversation:
    conversation = await service.store.get_conversation(session.owner, conversation_id)
    if conversation is None:
        raise _not_found(conversation_id)
    return conversation


async def update(service: Service, session: Session, conversation_id: str, body: bytes) -> Conversation:
    request: UpdateConversation = decode_body(_update, body)
    if request.metadata is msgspec.UNSET:
        raise MissingParam("Missing required parameter: 'metadata'.", param="metadata")
    conversation = await service.store.update_conversation(session.owner, conversation_id, _metadata(request.metadata))
    if conversation is None:
        raise _not_found(conversation_id)
    return conversation


async def delete(service: Service, session: Session, conversation_id: str) -> DeletedConversation:
    if not await service.store.delete_conversation(session.owner, conversation_id):
        raise _not_found(conversation_id)
    return DeletedConversation(id=conversation_id)


async def add_items(service: Service, session: Session, conversation_id: str, body: bytes) -> ItemList:
    request: AddItems = decode_body(_add, body)
    if request.items is msgspec.UNSET:
        raise MissingParam("Missing required parameter: 'items'.", param="items")
    items = _items(request.items)
    if not await service.store.add_conversation_items(session.owner, conversation_id, items):
        raise _not_found(conversation_id)
    return item_list(items, has_more=False)


async def list_items(
    service: Service,
    session: Session,
    conversation_id: str,
    *,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
    shown: Shown = NOTHING,
) -> ItemList:
    """A page of the items; a server-run call's results or outputs only where `shown` (`include`), as a
    response's (wire/included.py)."""
    page = await service.store.conversation_items(session.owner, conversation_id, after=after, limit=limit, order=order)
    if page is None:
        raise _not_found(conversation_id)
    return item_list([hide(item, shown) for item in page.items], page.has_more)


async def get_item(
    service: Service, session: Session, conversation_id: str, item_id: str, shown: Shown = NOTHING
) -> Any:
    item = await service.store.conversation_item(session.owner, conversation_id, item_id)
    if item is None:
        await get(service, session, conversation_id)  # 404 for the conversation before the item
        raise NotFound(f"Item with id '{item_id}' not found.", param="item_id", code="item_not_found")
    return item_to_builtins(hide(item, shown))


async def delete_item(service: Service, session: Session, conversation_id: str, item_id: str) -> Conversation:
    deleted = await service.store.delete_conversation_item(session.owner, conversation_id, item_id)
    if deleted is None:
        raise _not_found(conversation_id)
    if not deleted:
        raise NotFound(f"Item with id '{item_id}' not found.", param="item_id", code="item_not_found")
    return await get(service, session, conversation_id)


# -- a response's `conversation` --------------------------------------------------------------------------------
