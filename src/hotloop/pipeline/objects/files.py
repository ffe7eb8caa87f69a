"""The Files API (`/v1/files`): a client's documents, kept by the store (stores/files.py) for the key that uploaded
them, as OpenAI keeps them; file_search (issue 39) reads them through vector stores.

The transport hands over what the multipart form held (transports/files.py); everything is checked before a byte
is stored, and a file is readable only once whole.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

from hotloop.errors import InvalidParam, MissingParam, NotFound
from hotloop.ids import new_id
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.wire.files import (
    EXPIRES_MAX_S,
    EXPIRES_MIN_S,
    PURPOSES,
    FileDeleted,
    FileList,
    FileObject,
)

MAX_FILENAME = 255


@dataclass(slots=True)
class Upload:
    """A create's form: the file part (its name, its spooled bytes, their size) and the other fields as sent."""

    filename: str | None
    content: BinaryIO | None
    size: int
    purpose: str | None
    expires_anchor: str | None = None
    expires_seconds: str | None = None


def _not_found(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id}", param="file_id", code="file_not_found")


def _expires_at(upload: Upload, created_at: int) -> int | None:
    if upload.expires_anchor is None and upload.expires_seconds is None:
        return None
    if upload.expires_anchor != "created_at":
        raise InvalidParam("expires_after.anchor must be 'created_at'.", param="expires_after.anchor")
    seconds = upload.expires_seconds or ""
    if not seconds.isdigit() or not EXPIRES_MIN_S <= int(seconds) <= EXPIRES_MAX_S:
        raise InvalidParam(
            f"expires_after.seconds must be an integer between {EXPIRES_MIN_S} and {EXPIRES_MAX_S}.",
            param="expires_after.seconds",
        )
    return created_at + int(seconds)


def checked(upload: Upload) -> FileObject:
    """The file object a valid upload makes; raises 400 naming the field otherwise."""
    if upload.content is None:
        raise MissingParam("Missing required parameter: 'file'.", param="file")
    if upload.purpose is None:
        raise MissingParam("Missing required parameter: 'purpose'.", param="purpose")
    if upload.purpose not in PURPOSES:
        raise InvalidParam(f"purpose must be one of {', '.join(sorted(PURPOSES))}.", param="purpose")
    filename = (upload.filename or "").strip()
    if not filename or len(filename) > MAX_FILENAME or any(ord(c) < 32 for c in filename):
        raise InvalidParam(f"The file needs a name of 1 to {MAX_FILENAME} printable characters.", param="file")
    if upload.size == 0:
        raise InvalidParam("The file is empty.", param="file", code="empty_file")
    created_at = int(time.time())
    return FileObject(
        id=new_id("file"),
        bytes=upload.size,
        created_at=created_at,
        filename=filename,
        purpose=upload.purpose,
        expires_at=_expires_at(upload, created_at),
    )


async def create(service: Service, session: Session, upload: Upload) -> FileObject:
    file = checked(upload)
    assert upload.content is not None
    await service.store.put_file(session.owner, file, upload.content)
    return file


async def get(service: Service, session: Session, file_id: str) -> FileObject:
    file = await service.store.get_file(session.owner, file_id)
    if file is None:
        raise _not_found(file_id)
    return file


async def content(service: Service, session: Session, file_id: str) -> tuple[FileObject, AsyncIterator[bytes]]:
    """The file and its bytes, chunk by chunk (a missing file is a 404 before anything is sent)."""
    file = await get(service, session, file_id)
    return file, service.store.file_content(session.owner, file)


async def delete(service: Service, session: Session, file_id: str) -> FileDeleted:
    if not await service.store.delete_file(session.owner, file_id):
        raise _not_found(file_id)
    return FileDeleted(id=file_id)


async def list_files(
    service: Service,
    session: Session,
    *,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
    purpose: str | None,
) -> FileList:
    page = await service.store.list_files(session.owner, after=after, limit=limit, order=order, purpose=purpose)
    files = page.files
    return FileList(
        data=files,
        has_more=page.has_more,
        first_id=files[0].id if files else None,
        last_id=files[-1].id if files else None,
    )
