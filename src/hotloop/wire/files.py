"""The Files API's wire shapes (OpenAI's `FileObject`, its list and its deletion), no I/O."""

from __future__ import annotations

import msgspec

# What `purpose` may be (OpenAI's FilePurpose). hotloop stores every purpose alike; `assistants` and `user_data`
# are the ones file_search reads.
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
# `expires_after.seconds` bounds (OpenAI: an hour to 30 days), anchored at `created_at`.
EXPIRES_MIN_S, EXPIRES_MAX_S = 3600, 2_592_000
LIST_LIMIT_MAX = 10_000  # OpenAI's bound (and default) for GET /v1/files


class FileObject(msgspec.Struct, kw_only=True):
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    object: str = "file"
    status: str = "processed"  # a stored file is processed at once: hotloop keeps the bytes as given
    expires_at: int | None = None
    status_details: str | None = None


class FileList(msgspec.Struct, kw_only=True):
    data: list[FileObject]
    has_more: bool
    first_id: str | None
    last_id: str | None
    object: str = "list"


class FileDeleted(msgspec.Struct):
    id: str
    deleted: bool = True
    object: str = "file"


file_decoder = msgspec.json.Decoder(FileObject)
