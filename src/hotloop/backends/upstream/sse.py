"""An engine's SSE stream cut into its `data:` payloads as the socket delivers it: one read and one split per
chunk that arrived, however many lines it holds, instead of an awaited `readline` per line (two a token: the
`data:` line and the blank line after it). The payloads stay bytes: the stream readers decode them with msgspec
as they are.
"""

from __future__ import annotations

from typing import NamedTuple

from hotloop.backends.base import BackendError

MAX_LINE = 8 << 20  # an engine that repeats its whole text in every chunk (SGLang without incremental output)


class ErrorLine(NamedTuple):
    """llama.cpp's server sends a failure as an `error:` line: its text, in its place among the payloads (the
    payloads before it are the client's output, so they are read first)."""

    raw: bytes


class SSEPayloads:
    def __init__(self) -> None:
        self._partial: list[bytes] = []  # the start of a line whose end has not arrived
        self._partial_size = 0

    def feed(self, chunk: bytes) -> list[bytes | ErrorLine]:
        """The payloads of the lines `chunk` completes; `b""` (the stream's end) completes the last one."""
        if not chunk:
            chunk = b"\n"
        if b"\n" not in chunk:
            self._keep(chunk)
            return []
        if self._partial:
            chunk = b"".join([*self._partial, chunk])
            self._partial.clear()
            self._partial_size = 0
        *lines, rest = chunk.split(b"\n")
        if rest:
            self._keep(rest)
        return [data for line in lines if (data := payload(line)) is not None]

    def _keep(self, part: bytes) -> None:
        self._partial.append(part)
        self._partial_size += len(part)
        if self._partial_size > MAX_LINE:
            raise BackendError(f"The upstream engine sent a line longer than {MAX_LINE} bytes.")


def payload(line: bytes) -> bytes | ErrorLine | None:
    """A `data:` line's payload, an `error:` line's `ErrorLine`; None for any other line (SSE comments, `event:`
    lines, blank separators)."""
    if line.startswith(b"data:"):
        return line[5:].strip()
    if line.startswith(b"error:"):
        return ErrorLine(line[6:].strip())
    return None
