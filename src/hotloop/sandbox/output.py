"""Bounded output: what a process wrote, kept whole up to a limit and cut in the middle past it (the head says how
it began, the tail how it ended), the cut said in the text."""

from __future__ import annotations


def cut(head: bytes, tail: bytes, total: int) -> str:
    """The text of an output of `total` bytes of which the first (`head`) and the last (`tail`) were kept."""
    if total <= len(head) + len(tail):
        return (head + tail).decode(errors="replace")
    omitted = total - len(head) - len(tail)
    return f"{head.decode(errors='replace')}\n[... {omitted} bytes omitted ...]\n{tail.decode(errors='replace')}"


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters of text (a shell call's `max_output_length`), the middle cut."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters omitted ...]\n"
    keep = max(0, limit - len(marker))
    head = keep - keep // 2
    return text[:head] + marker + text[len(text) - keep // 2 :] if keep else text[:limit]


class Capture:
    """A stream read to its end, keeping its first and last `limit` bytes and counting the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.limit)]

    def text(self) -> str:
        return cut(bytes(self.head), bytes(self.tail), self.total)
