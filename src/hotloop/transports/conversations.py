"""HTTP endpoints of the Conversations API: thin handlers over pipeline/objects/conversations.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hotloop.pipeline.objects import conversations
from hotloop.transports.asgi import included
from hotloop.transports.http import http_session, raw_json, read_body
from hotloop.transports.paging import page_params
from hotloop.wire.included import shown

_encode = msgspec.json.Encoder().encode
Handler = Callable[[Request], Awaitable[Response]]


def _endpoint(operation: Callable[..., Awaitable[Any]], *path: str, body: bool = False) -> Handler:
    """A handler calling `operation(service, session, *path parameters[, body])` and sending its result as JSON."""

    async def handle(request: Request) -> Response:
        service, session = http_session(request)
        args: list[Any] = [request.path_params[name] for name in path]
        if body:
            args.append(await read_body(request, service.settings.max_body_bytes))
        return raw_json(_encode(await operation(service, session, *args)))

    return handle


async def list_items(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params)
    showing = shown(included(request.query_params))  # `include`: a file search's results, a code run's outputs
    page = await conversations.list_items(
        service, session, request.path_params["conversation_id"], after=after, limit=limit, order=order, shown=showing
    )
    return raw_json(_encode(page))


async def get_item(request: Request) -> Response:
    service, session = http_session(request)
    path, showing = request.path_params, shown(included(request.query_params))
    item = await conversations.get_item(service, session, path["conversation_id"], path["item_id"], showing)
    return raw_json(_encode(item))


def conversation_routes() -> list[Route]:
    base = "/v1/conversations"
    one = base + "/{conversation_id}"
    cid, iid = "conversation_id", "item_id"
    return [
        Route(base, _endpoint(conversations.create, body=True), methods=["POST"]),
        Route(one, _endpoint(conversations.get, cid), methods=["GET"]),
        Route(one, _endpoint(conversations.update, cid, body=True), methods=["POST"]),
        Route(one, _endpoint(conversations.delete, cid), methods=["DELETE"]),
        Route(one + "/items", _endpoint(conversations.add_items, cid, body=True), methods=["POST"]),
        Route(one + "/items", list_items, methods=["GET"]),
        Route(one + "/items/{item_id}", get_item, methods=["GET"]),
        Route(one + "/items/{item_id}", _endpoint(conversations.delete_item, cid, iid), methods=["DELETE"]),
    ]
