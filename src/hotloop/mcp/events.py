"""An event stream (HTML Living Standard §9.2, "server-sent events") cut into the data of its `message` events, as
the socket delivers it: bytes in (`feed`), each completed event's data out, one event bounded in size. How a
streamable HTTP server answers a request with `text/event-stream`: one JSON-RPC message per event. No I/O."""

from __future__ import annotations


class EventTooLarge(Exception):
    """One event (or one line) passed the stream's bound."""


class EventStream:
    """Feed it the body's chunks; each call returns the data of the `message` events the chunk completed (lines
    end with CRLF, LF or CR; an event's `data:` lines joined by LF; comments, `id:` and `retry:` lines skipped;
    events of another type, and ones with no data, dropped)."""

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._partial: list[bytes] = []  # the start of a line whose end has not arrived
        self._partial_size = 0
        self._data: list[bytes] = []  # the current event's data lines
        self._size = 0
        self._type = b"message"

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of the events `chunk` completes; `b""` (the body's end) ends the last line, not its event."""
        if not chunk:
            chunk = b"\n" if self._partial else b""
        elif b"\n" not in chunk and b"\r" not in chunk:
            self._keep(chunk)
            return []
        if self._partial:
            chunk = b"".join([*self._partial, chunk])
            self._partial.clear()
            self._partial_size = 0
        held = chunk.endswith(b"\r")  # perhaps the first half of a CRLF cut by the chunking: what follows decides
        if held:
            chunk = chunk[:-1]
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = chunk.split(b"\n")
        if rest:
            self._keep(rest)
        if held:
            self._keep(b"\r")
        completed: list[bytes] = []
        for line in lines:
            data = self._line(line)
            if data is not None:
                completed.append(data)
        return completed

    def _line(self, line: bytes) -> bytes | None:
        if not line:  # an event's end
            data, kind = self._data, self._type
            self._data, self._size, self._type = [], 0, b"message"
            if data and kind == b"message":
                return data[0] if len(data) == 1 else b"\n".join(data)
            return None
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise EventTooLarge(f"an event of the MCP server's stream passed {self.max_event_bytes} bytes")
            self._data.append(value)
        elif field == b"event":
            self._type = value or b"message"
        return None

    def _keep(self, part: bytes) -> None:
        self._partial.append(part)
        self._partial_size += len(part)
        if self._partial_size + self._size > self.max_event_bytes:
            raise EventTooLarge(f"an event of the MCP server's stream passed {self.max_event_bytes} bytes")
