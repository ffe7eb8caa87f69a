"""Reads and management of stored responses (protocol.md §1.8): retrieve, delete, list input items, cancel; and
the caller's usage ledger."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hotloop.errors import InvalidParam, NotFound
from hotloop.metering.records import UsageRecord, UsageTotals
from hotloop.pipeline import background
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.wire.items import ContextItem, item_to_builtins
from hotloop.wire.response import TERMINAL_STATUSES, DeletedResponse, Response


class ItemList(msgspec.Struct):
    data: list[Any]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


class UsageList(msgspec.Struct):
    data: list[UsageRecord]
    first_id: str | None
    last_id: str | None
    has_more: bool
    totals: UsageTotals
    object: str = "list"


def item_list(items: list[ContextItem], has_more: bool) -> ItemList:
    """A page of items as the list endpoints send it (`first_id`/`last_id` are the page's ends)."""
    data = [item_to_builtins(item) for item in items]
    return ItemList(
        data=data,
        first_id=data[0].get("id") if data else None,
        last_id=data[-1].get("id") if data else None,
        has_more=has_more,
    )


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


async def get_response(service: Service, session: Session, response_id: str) -> Response:
    response = await service.store.get(session.owner, response_id)
    if response is None:
        raise _not_found(response_id)
    return response


async def finished_response(service: Service, session: Session, response_id: str) -> Response:
    """The response once it is terminal: a background one still generating is waited for (not cancelled).

    For `GET …?stream=true`: the replay starts when generation has ended, so the client gets the whole
    sequence, terminal included, a little later than live. A non-terminal response with no running task (a
    server restart cut it off) cannot be replayed: 400.
    """
    response = await get_response(service, session, response_id)
    task = background.running(service, response_id)
    if response.status not in TERMINAL_STATUSES and task is not None:
        await background.wait(task)
        response = await get_response(service, session, response_id)
    if response.status not in TERMINAL_STATUSES:
        raise InvalidParam(
            f"Response '{response_id}' is {response.status} and no longer generating; it cannot be streamed.",
            param="stream",
        )
    return response


async def delete_response(service: Service, session: Session, response_id: str) -> DeletedResponse:
    task = background.running(service, response_id)
    if task is not None:
        await get_response(service, session, response_id)  # another key's delete must not stop it
        # Stop it before deleting: a cancelled turn stores itself, which would bring the response back.
        await background.stop(task)
    if not await service.store.delete(session.owner, response_id):
        raise _not_found(response_id)
    service.forget(response_id)
    return DeletedResponse(id=response_id)


async def input_items(
    service: Service,
    session: Session,
    response_id: str,
    *,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> ItemList:
    page = await service.store.input_items(session.owner, response_id, after=after, limit=limit, order=order)
    if page is None:
        raise _not_found(response_id)
    return item_list(page.items, page.has_more)


async def cancel_response(service: Service, session: Session, response_id: str) -> Response:
    """Background responses only; an in-flight one stops and ends `cancelled`, a finished one is returned as is."""
    response = await get_response(service, session, response_id)
    if not response.background:
        raise InvalidParam(
            "Only background responses can be cancelled.",
            param="response_id",
            code="response_not_cancellable",
        )
    task = background.running(service, response_id)
    if task is not None and response.status not in TERMINAL_STATUSES:
        await background.stop(task)
        response = await get_response(service, session, response_id)
    return response


async def usage(service: Service, session: Session, *, after: str | None, limit: int, model: str | None) -> UsageList:
    """The caller's usage records, oldest first, with totals over every record the query selects (all pages)."""
    page = await service.store.usage(session.owner, after=after, limit=limit, model=model)
    data = page.records
    return UsageList(
        data=data,
        first_id=data[0].response_id if data else None,
        last_id=data[-1].response_id if data else None,
        has_more=page.has_more,
        totals=page.totals,
    )
