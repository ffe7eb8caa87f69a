"""A multipart upload read as it arrives: the file parts spooled to temporary files (never held whole in memory),
the body cut off with 413 once it passes the cap. The Files API's and the Containers API's uploads (one file) and
the Skills API's (a skill's files, or its zip) all come this way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message

from hotloop.errors import InvalidParam, RequestTooLarge

# What a multipart form adds around the file's bytes (boundaries, headers, the other fields), allowed beyond the cap;
# each file part past the first adds up to PART_SLACK more (its boundary and headers, its filename a path).
FORM_SLACK = 64 * 1024
PART_SLACK = 4 * 1024


def is_multipart(request: Request) -> bool:
    return request.headers.get("content-type", "").startswith("multipart/form-data")


@asynccontextmanager
async def multipart_form(
    request: Request, limit: int, *, max_files: int = 1, param: str = "file"
) -> AsyncIterator[FormData]:
    """The request's form, with at most `max_files` file parts of at most `limit` bytes together (413 beyond,
    declared or not); a form that does not parse, holds more file parts, or ends early, is a 400 naming `param`. The
    spooled files go when the block ends."""
    cap = limit + FORM_SLACK + (max_files - 1) * PART_SLACK
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise RequestTooLarge(limit)
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > cap:
            raise RequestTooLarge(limit)
        return message

    try:
        form = await Request(request.scope, receive).form(max_files=max_files, max_fields=8)
    except HTTPException as exc:  # a form that does not parse
        raise InvalidParam(f"The multipart form could not be read: {exc.detail}", param=param) from None
    except ClientDisconnect:  # the client went away mid-upload: nothing is stored, nothing to log as a fault
        raise InvalidParam("The upload ended before its form did.", param=param) from None
    try:
        sizes = [part.size or 0 for _, part in form.multi_items() if isinstance(part, UploadFile)]
        if sum(sizes) > limit:
            raise RequestTooLarge(limit)
        yield form
    finally:
        await form.close()


def text_field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None
