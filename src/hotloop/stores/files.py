"""What a store keeps for the Files API: files (their `FileObject`) and their bytes, in chunks, owned by one API
key. SQLite and PostgreSQL keep them next to the responses; the Redis store keeps none (`FilesNotKept`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import BinaryIO, Literal, Protocol

import msgspec

from hotloop.errors import HotloopError, ServerError
from hotloop.wire.files import FileObject

CHUNK_BYTES = 1 << 20  # a file's bytes are kept, written and read in pieces of this size: no step holds them all
EXPIRY_SWEEP_S = 60.0  # how often each replica deletes the files past their `expires_at`
EXPIRY_BATCH = 10  # files deleted per step (each with up to 512 chunks): a step stays short
log = logging.getLogger("hotloop.store")


class FilePage(msgspec.Struct):
    files: list[FileObject]
    has_more: bool


class FilesNotKept(HotloopError):
    """501: this server's store keeps no files (the Redis store: its memory is no place for documents)."""

    status = 501
    type = "server_error"
    code = "files_not_supported"

    def __init__(self) -> None:
        super().__init__(
            "This server's store keeps no files: the Files API needs the SQLite or PostgreSQL store (store_url)."
        )


async def read_chunk(content: BinaryIO) -> bytes:
    """The next chunk of an upload's spooled bytes, read off the event loop (b"" at the end). A read that fails is
    the server's fault, not the store's: it must not mark the store down."""
    try:
        return await asyncio.to_thread(content.read, CHUNK_BYTES)
    except OSError as exc:
        raise ServerError(f"The uploaded file could not be read back: {exc}") from exc


async def chunks_of(content: bytes | BinaryIO) -> AsyncIterator[bytes]:
    """`content` in pieces of CHUNK_BYTES at most, as a store writes them: bytes sliced, a file read off the loop."""
    if isinstance(content, bytes):
        for start in range(0, len(content), CHUNK_BYTES):
            yield content[start : start + CHUNK_BYTES]
        return
    while chunk := await read_chunk(content):
        yield chunk


class FileStore(Protocol):
    """Owner-scoped like responses: another owner's file, or one past its `expires_at`, reads as missing."""

    async def put_file(self, owner: str, file: FileObject, content: BinaryIO) -> None:
        """Store `file` with its bytes, read from `content` in chunks off the event loop: readable only once
        whole; a failure leaves nothing readable."""
        ...

    async def get_file(self, owner: str, file_id: str) -> FileObject | None: ...

    async def list_files(
        self, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"], purpose: str | None
    ) -> FilePage:
        """A page by creation time in `order`, after file id `after` (an unknown id: an empty page)."""
        ...

    def file_content(self, owner: str, file: FileObject) -> AsyncIterator[bytes]:
        """The bytes of a file `get_file` found, chunk by chunk."""
        ...

    async def delete_file(self, owner: str, file_id: str) -> bool:
        """Delete it and its bytes; False when it is not there."""
        ...

    async def expire_files(self, now: int, limit: int) -> int:
        """Delete up to `limit` files (any owner's) whose `expires_at` has passed, with their bytes; how many."""
        ...


async def sweep_expired_files(store: FileStore, interval_s: float = EXPIRY_SWEEP_S) -> None:
    """Every replica's background sweep of expired files, in short batches (replicas racing delete each file once:
    each step deletes only what is still there)."""
    while True:
        try:
            while await store.expire_files(int(time.time()), EXPIRY_BATCH) == EXPIRY_BATCH:
                pass
        except HotloopError as exc:  # the store is down: try again next time
            log.warning("the expired files' sweep failed: %s", exc.message)
        await asyncio.sleep(interval_s)
