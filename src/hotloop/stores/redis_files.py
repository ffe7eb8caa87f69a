"""The Files API on the Redis store: refused (501 `files_not_supported`). Redis holds its data in memory, sized for
responses and their caches; documents of up to `files_max_bytes` each belong on disk, in SQLite or PostgreSQL
(docs/stores.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import BinaryIO, Literal

from hotloop.stores.files import FilePage, FilesNotKept
from hotloop.wire.files import FileObject


class RedisFiles:
    async def put_file(self, owner: str, file: FileObject, content: BinaryIO) -> None:
        raise FilesNotKept()

    async def get_file(self, owner: str, file_id: str) -> FileObject | None:
        raise FilesNotKept()

    async def list_files(
        self, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"], purpose: str | None
    ) -> FilePage:
        raise FilesNotKept()

    def file_content(self, owner: str, file: FileObject) -> AsyncIterator[bytes]:
        raise FilesNotKept()

    async def delete_file(self, owner: str, file_id: str) -> bool:
        raise FilesNotKept()

    async def expire_files(self, now: int, limit: int) -> int:
        return 0  # it keeps none
