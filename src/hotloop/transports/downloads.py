"""A stored file's bytes as an HTTP download (the Files, Containers and Skills APIs' `/content`): streamed chunk by
chunk as the store reads them, its length known, named in `content-disposition`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

from starlette.responses import StreamingResponse


def download(
    chunks: AsyncIterator[bytes], size: int, name: str, media_type: str = "application/octet-stream"
) -> StreamingResponse:
    headers = {"content-length": str(size), "content-disposition": attachment(name)}
    return StreamingResponse(chunks, media_type=media_type, headers=headers)


def attachment(name: str) -> str:
    """The header naming the file: plain ASCII for every client, and the UTF-8 name as RFC 6266 §4.3 gives it (a
    header is latin-1 on the wire: a name beyond it, written as is, could not be sent at all)."""
    plain = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
