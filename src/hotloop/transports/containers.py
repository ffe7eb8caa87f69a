"""HTTP endpoints of the Containers API: thin handlers over pipeline/objects/containers.py. A JSON body is decoded
once into its wire Struct (unknown fields refused with a 400 naming them); a container file comes as a multipart
upload (transports/uploads.py, cut off past `files_max_bytes`) or as JSON naming a Files API `file_id`."""

from __future__ import annotations

import msgspec
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hotloop.errors import InvalidParam
from hotloop.pipeline.objects import containers as api
from hotloop.transports.downloads import download
from hotloop.transports.http import http_session, raw_json, read_body
from hotloop.transports.paging import page_params
from hotloop.transports.uploads import is_multipart, multipart_form, text_field
from hotloop.wire.containers import LIST_LIMIT_MAX, CreateContainer, CreateFileById
from hotloop.wire.request import decode_body

_encode = msgspec.json.Encoder().encode
_create = msgspec.json.Decoder(CreateContainer)
_by_id = msgspec.json.Decoder(CreateFileById)


async def create_container(request: Request) -> Response:
    service, session = http_session(request)
    body = decode_body(_create, await read_body(request, service.settings.max_body_bytes) or b"{}")
    return raw_json(_encode(await api.create(service, session.owner, body)))


async def list_containers(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params, max_limit=LIST_LIMIT_MAX)
    name = request.query_params.get("name")
    return raw_json(_encode(await api.list_containers(service, session.owner, after, limit, order, name)))


async def get_container(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await api.get(service, session.owner, request.path_params["container_id"])))


async def delete_container(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await api.delete(service, session.owner, request.path_params["container_id"])))


async def create_file(request: Request) -> Response:
    """A multipart upload (`file`), or JSON (or a form field) naming a Files API file (`file_id`): one of them."""
    service, session = http_session(request)
    container_id = request.path_params["container_id"]
    if not is_multipart(request):
        body = decode_body(_by_id, await read_body(request, service.settings.max_body_bytes) or b"{}")
        return raw_json(_encode(await api.copy_file(service, session.owner, container_id, body)))
    async with multipart_form(request, service.settings.files_max_bytes) as form:
        part, file_id = form.get("file"), text_field(form, "file_id")
        if file_id is not None and part is not None:
            raise InvalidParam("Give either a file or a file_id, not both.", param="file_id")
        if file_id is not None:
            made = await api.copy_file(service, session.owner, container_id, CreateFileById(file_id=file_id))
        elif isinstance(part, UploadFile):
            made = await api.upload_file(service, session.owner, container_id, part.filename, part.file)
        else:
            made = await api.upload_file(service, session.owner, container_id, None, None)
    return raw_json(_encode(made))


async def list_files(request: Request) -> Response:
    service, session = http_session(request)
    after, limit, order = page_params(request.query_params, max_limit=LIST_LIMIT_MAX)
    listed = await api.list_files(service, session.owner, request.path_params["container_id"], after, limit, order)
    return raw_json(_encode(listed))


async def get_file(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    return raw_json(_encode(await api.get_file(service, session.owner, path["container_id"], path["file_id"])))


async def file_content(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    file, chunks = await api.file_content(service, session.owner, path["container_id"], path["file_id"])
    return download(chunks, file.bytes, file.path.rsplit("/", 1)[-1])


async def delete_file(request: Request) -> Response:
    service, session = http_session(request)
    path = request.path_params
    return raw_json(_encode(await api.delete_file(service, session.owner, path["container_id"], path["file_id"])))


def container_routes() -> list[Route]:
    base = "/v1/containers"
    one = base + "/{container_id}"
    file = one + "/files/{file_id}"
    return [
        Route(base, create_container, methods=["POST"]),
        Route(base, list_containers, methods=["GET"]),
        Route(one, get_container, methods=["GET"]),
        Route(one, delete_container, methods=["DELETE"]),
        Route(one + "/files", create_file, methods=["POST"]),
        Route(one + "/files", list_files, methods=["GET"]),
        Route(file, get_file, methods=["GET"]),
        Route(file, delete_file, methods=["DELETE"]),
        Route(file + "/content", file_content, methods=["GET"]),
    ]
