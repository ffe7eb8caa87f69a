"""HTTP endpoints of the Files API: thin handlers over pipeline/objects/files.py. An upload is a multipart form,
parsed as it arrives and cut off with 413 once it passes `files_max_bytes` (transports/uploads.py)."""

from __future__ import annotations

import msgspec
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hotloop.errors import InvalidParam
from hotloop.pipeline.objects import files
from hotloop.transports.downloads import download
from hotloop.transports.http import http_session, raw_json
from hotloop.transports.paging import page_params
from hotloop.transports.uploads import is_multipart, multipart_form, text_field
from hotloop.wire.files import LIST_LIMIT_MAX

_encode = msgspec.json.Encoder().encode


async def create_file(request: Request) -> Response:
    service, session = http_session(request)
    if not is_multipart(request):
        raise InvalidParam("Upload a file as multipart/form-data (fields 'file' and 'purpose').", param="file")
    async with multipart_form(request, service.settings.files_max_bytes) as form:
        upload = files.Upload(
            filename=None,
            content=None,
            size=0,
            purpose=text_field(form, "purpose"),
            expires_anchor=text_field(form, "expires_after[anchor]"),
            expires_seconds=text_field(form, "expires_after[seconds]"),
        )
        part = form.get("file")
        if isinstance(part, UploadFile):
            upload.filename, upload.content, upload.size = part.filename, part.file, part.size or 0
        made = await files.create(service, session, upload)
    return raw_json(_encode(made))


async def list_files(request: Request) -> Response:
    service, session = http_session(request)
    query = request.query_params
    # OpenAI's bounds for files: up to 10,000 a page, and that many by default.
    after, limit, order = page_params(query, default_limit=LIST_LIMIT_MAX, max_limit=LIST_LIMIT_MAX)
    listed = await files.list_files(
        service, session, after=after, limit=limit, order=order, purpose=query.get("purpose")
    )
    return raw_json(_encode(listed))


async def get_file(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await files.get(service, session, request.path_params["file_id"])))


async def file_content(request: Request) -> Response:
    service, session = http_session(request)
    file, chunks = await files.content(service, session, request.path_params["file_id"])
    return download(chunks, file.bytes, file.filename)


async def delete_file(request: Request) -> Response:
    service, session = http_session(request)
    return raw_json(_encode(await files.delete(service, session, request.path_params["file_id"])))


def file_routes() -> list[Route]:
    return [
        Route("/v1/files", create_file, methods=["POST"]),
        Route("/v1/files", list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", get_file, methods=["GET"]),
        Route("/v1/files/{file_id}", delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", file_content, methods=["GET"]),
    ]
