"""HTTP endpoints of the Vector Stores API: thin handlers over pipeline/objects/vector_stores.py. A body is decoded
once into its wire Struct (unknown fields refused with a 400 naming them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hotloop.pipeline.objects import vector_stores as api
from hotloop.transports.http import http_session, raw_json, read_body
from hotloop.transports.paging import page_params
from hotloop.wire.request import decode_body
from hotloop.wire.vector_stores import (
    LIST_LIMIT_MAX,
    CreateBatch,
    CreateFile,
    CreateStore,
    Search,
    UpdateFile,
    UpdateStore,
)

_encode = msgspec.json.Encoder().encode
Handler = Callable[[Request], Awaitable[Response]]
_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {
    shape: msgspec.json.Decoder(shape)
    for shape in (CreateStore, UpdateStore, CreateFile, UpdateFile, CreateBatch, Search)
}


def _endpoint(operation: Callable[..., Awaitable[Any]], *path: str, body: type[Any] | None = None) -> Handler:
    """A handler calling `operation(service, owner, *path parameters[, decoded body])`, its result sent as JSON."""

    async def handle(request: Request) -> Response:
        service, session = http_session(request)
        args: list[Any] = [request.path_params[name] for name in path]
        if body is not None:
            raw = await read_body(request, service.settings.max_body_bytes)
            args.append(decode_body(_DECODERS[body], raw or b"{}"))
        return raw_json(_encode(await operation(service, session.owner, *args)))

    return handle


async def list_stores(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params, max_limit=LIST_LIMIT_MAX)
    return raw_json(_encode(await api.list_stores(service, session.owner, after, limit, order)))


async def list_files(request: Request) -> Response:
    service, session = http_session(request)
    query = request.query_params
    page = page_params(query, max_limit=LIST_LIMIT_MAX)
    path = request.path_params
    listed = await api.list_files(
        service, session.owner, path["vector_store_id"], page, query.get("filter"), path.get("batch_id")
    )
    return raw_json(_encode(listed))


async def _update_file(service: Any, owner: str, store_id: str, file_id: str, body: UpdateFile) -> Any:
    return await api.update_file(service, owner, store_id, file_id, body.attributes)


def vector_store_routes() -> list[Route]:
    base = "/v1/vector_stores"
    one = base + "/{vector_store_id}"
    file = one + "/files/{file_id}"
    batch = one + "/file_batches/{batch_id}"
    vs, fid, bid = "vector_store_id", "file_id", "batch_id"
    return [
        Route(base, _endpoint(api.create, body=CreateStore), methods=["POST"]),
        Route(base, list_stores, methods=["GET"]),
        Route(one, _endpoint(api.get, vs), methods=["GET"]),
        Route(one, _endpoint(api.update, vs, body=UpdateStore), methods=["POST"]),
        Route(one, _endpoint(api.delete, vs), methods=["DELETE"]),
        Route(one + "/search", _endpoint(api.search, vs, body=Search), methods=["POST"]),
        Route(one + "/files", _endpoint(api.add_file, vs, body=CreateFile), methods=["POST"]),
        Route(one + "/files", list_files, methods=["GET"]),
        Route(file, _endpoint(api.get_file, vs, fid), methods=["GET"]),
        Route(file, _endpoint(_update_file, vs, fid, body=UpdateFile), methods=["POST"]),
        Route(file, _endpoint(api.remove_file, vs, fid), methods=["DELETE"]),
        Route(file + "/content", _endpoint(api.file_content, vs, fid), methods=["GET"]),
        Route(one + "/file_batches", _endpoint(api.create_batch, vs, body=CreateBatch), methods=["POST"]),
        Route(batch, _endpoint(api.get_batch, vs, bid), methods=["GET"]),
        Route(batch + "/cancel", _endpoint(api.cancel_batch, vs, bid), methods=["POST"]),
        Route(batch + "/files", list_files, methods=["GET"]),
    ]
