"""Tool calls in generated text, parsed as the text streams (the `tokens` backend's `tool_parser` setting).

- `hermes`: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks. Text before a block streams as text at
  once; each call is emitted as ToolCallStart/Delta/End as soon as its block closes. An output that is a bare JSON
  call (what a JSON-schema-constrained `tool_choice: required` produces) is read as the `json` parser reads it.
- `json`: the whole output is one call or a JSON list of calls; other text streams through.
- `none`: everything is text.

A block that does not parse, or names a tool that was not offered, is released as text: never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hotloop.backends.base import Delta, TextDelta
from hotloop.backends.toolcalls.text import CLOSE, OPEN, HeldCallParser, ToolCalls
from hotloop.chat.specs import ToolSpec


class ToolParser(Protocol):
    def feed(self, text: str) -> list[Delta]: ...

    def finish(self) -> list[Delta]: ...


def make_parser(kind: str, tools: Sequence[ToolSpec], parallel: bool) -> ToolParser:
    if kind == "none" or not tools:
        return PlainText()
    calls = ToolCalls(tools, parallel)
    return HermesParser(calls) if kind == "hermes" else JsonParser(calls)


class PlainText:
    def feed(self, text: str) -> list[Delta]:
        return [TextDelta(text)] if text else []

    def finish(self) -> list[Delta]:
        return []


class JsonParser(HeldCallParser):
    """Output starting with `{` or `[` is held to the end and read as a call or a list of calls."""

    def holds(self, head: str) -> bool:
        return head[0] in "{["

    def parse(self, text: str) -> list[tuple[ToolSpec, str]] | None:
        return self.calls.parse(text.strip())


class HermesParser:
    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls
        self.buffer = ""  # text not yet emitted: a possible start of OPEN, leading whitespace, or an open block
        self.in_block = False
        self.bare: JsonParser | None = None  # the output started with `{` or `[`: a bare JSON call
        self.decided = False

    def feed(self, text: str) -> list[Delta]:
        if self.bare is not None:
            return self.bare.feed(text)
        self.buffer += text
        if not self.decided:
            head = self.buffer.lstrip()
            if not head:
                return []
            self.decided = True
            if head[0] in "{[":
                self.bare = JsonParser(self.calls)
                text, self.buffer = self.buffer, ""
                return self.bare.feed(text)
        return self._scan()

    def _scan(self) -> list[Delta]:
        out: list[Delta] = []
        while True:
            if self.in_block:
                end = self.buffer.find(CLOSE)
                if end < 0:
                    return out
                body, self.buffer = self.buffer[:end], self.buffer[end + len(CLOSE) :]
                self.in_block = False
                out += self._block(body, closed=True)
                continue
            start = self.buffer.find(OPEN)
            if start >= 0:
                out += self._text(self.buffer[:start])
                self.buffer = self.buffer[start + len(OPEN) :]
                self.in_block = True
                continue
            ready = len(self.buffer) - _partial_suffix(self.buffer, OPEN)
            if self.buffer[:ready].strip():
                out += self._text(self.buffer[:ready])
                self.buffer = self.buffer[ready:]
            return out  # else only whitespace so far: held with what follows

    def _text(self, text: str) -> list[Delta]:
        """Text outside blocks; whitespace alone before or between calls is dropped, not made a message."""
        return [TextDelta(text)] if text.strip() else []

    def _block(self, body: str, closed: bool) -> list[Delta]:
        calls = self.calls.parse(body.strip())
        if calls:
            return self.calls.deltas(calls)
        return [TextDelta(OPEN + body + (CLOSE if closed else ""))]

    def finish(self) -> list[Delta]:
        if self.bare is not None:
            return self.bare.finish()
        rest, self.buffer = self.buffer, ""
        if self.in_block:  # generation stopped inside a block (a stop token, or the length limit)
            return self._block(rest, closed=False)
        if rest and (rest.strip() or self.calls.count == 0):
            return [TextDelta(rest)]
        return []


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker` (held until the next piece)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
