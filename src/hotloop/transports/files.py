"""HTTP endpoints of the Files API: thin handlers over pipeline/objects/files.py. An upload is a multipart form,
parsed as it arrives (the file part spooled to a temporary file, never held whole in memory) and cut off with 413
once it passes `files_max_bytes`."""

from __future__ import annotations

import msgspec
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message

from hotloop.errors import InvalidParam, RequestTooLarge
from hotloop.pipeline.objects import files
from hotloop.transports.http import http_session, raw_json
from hotloop.transports.paging import page_params
from hotloop.wire.files import LIST_LIMIT_MAX

_encode = msgspec.json.Encoder().encode
# What a multipart form adds around the file's bytes (boundaries, headers, the other fields), allowed beyond the cap.
_FORM_SLACK = 64 * 1024


async def create_file(request: Request) -> Response:
    service, session = http_session(request)
    limit = service.settings.files_max_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + _FORM_SLACK:
        raise RequestTooLarge(limit)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidParam("Upload a file as multipart/form-data (fields 'file' and 'purpose').", param="file")
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > limit + _FORM_SLACK:
            raise RequestTooLarge(limit)
        return message

    try:
        form = await Request(request.scope, receive).form(max_files=1, max_fields=8)
    except HTTPException as exc:  # a form that does not parse
        raise InvalidParam(f"The multipart form could not be read: {exc.detail}", param="file") from None
    except ClientDisconnect:  # the client went away mid-upload: nothing is stored, nothing to log as a fault
        raise InvalidParam("The upload ended before its form did.", param="file") from None
    try:
        part = form.get("file")
        upload = files.Upload(
            filename=None,
            content=None,
            size=0,
            purpose=_text(form.get("purpose")),
            expires_anchor=_text(form.get("expires_after[anchor]")),
            expires_seconds=_text(form.get("expires_after[seconds]")),
        )
        if isinstance(part, UploadFile):
            upload.filename, upload.content, upload.size = part.filename, part.file, part.size or 0
        if upload.size > limit:
            raise RequestTooLarge(limit)
        made = await files.create(service, session, upload)
    finally:
        await form.close()  # the spooled file goes
    return raw_json(_encode(made))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


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
    quoted = file.filename.replace("\\", "_").replace('"', "_")
    return StreamingResponse(
        chunks,
        media_type="application/octet-stream",
        headers={"content-length": str(file.bytes), "content-disposition": f'attachment; filename="{quoted}"'},
    )


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
