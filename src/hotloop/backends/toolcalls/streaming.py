"""Tool calls in generated text, parsed as the text streams (the `tokens` backend's `tool_parser` setting).

- `hermes`: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks. Text before a block streams as text at
  once. A block that starts with the name of an offered tool and then its `arguments` object (or a freeform tool's
  `input` string) streams: ToolCallStart once the name is read, the arguments as ToolCallDeltas as they are
  written, ToolCallEnd when the block closes. Any other block is held and emitted whole when it closes. An output
  that is a bare JSON call (what a JSON-schema-constrained `tool_choice: required` produces) is read as the `json`
  parser reads it.
- `json`: the whole output is one call or a JSON list of calls; other text streams through.
- `none`: everything is text.

A held block that names a tool that was not offered is released as text: never an error. A call to an offered tool
cut short (the length limit, a block closed early) or that does not parse ends with the arguments written so far,
`incomplete` (toolcalls/text.py `ToolCalls.unfinished`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Protocol

from hotloop.backends.base import Delta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.toolcalls.arguments import ObjectStream, StringStream
from hotloop.backends.toolcalls.text import CLOSE, OPEN, HeldCallParser, ToolCalls
from hotloop.chat.specs import ToolSpec


class ToolParser(Protocol):
    def feed(self, text: str) -> list[Delta]: ...

    def finish(self, cut: bool = False) -> list[Delta]:
        """The deltas the end of the output releases; `cut`: the length limit stopped it (a call open then is
        incomplete)."""
        ...


def make_parser(kind: str, tools: Sequence[ToolSpec], parallel: bool) -> ToolParser:
    if kind == "none" or not tools:
        return PlainText()
    calls = ToolCalls(tools, parallel)
    return HermesParser(calls) if kind == "hermes" else JsonParser(calls)


class PlainText:
    def feed(self, text: str) -> list[Delta]:
        return [TextDelta(text)] if text else []

    def finish(self, cut: bool = False) -> list[Delta]:
        return []


class JsonParser(HeldCallParser):
    """Output starting with `{` or `[` is held to the end and read as a call or a list of calls."""

    def holds(self, head: str) -> bool:
        return head[0] in "{["

    def parse(self, text: str) -> list[tuple[ToolSpec, str]] | None:
        return self.calls.parse(text.strip())


# A call's head as models write it: the name first, then its payload's key; the payload streams from here on.
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(arguments|parameters|input)"\s*:\s*(?=\S)')


class HermesParser:
    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls
        self.buffer = ""  # text not yet emitted: a possible start of OPEN, leading whitespace, or an open block
        self.in_block = False
        self.held = False  # the open block is held whole to its end (it does not stream)
        self.payload: ObjectStream | StringStream | None = None  # the open block's call, streaming
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
                if not self.held:
                    out += self._stream(end)
                    end = self.buffer.find(CLOSE)
                if end < 0:
                    return out
                body, self.buffer = self.buffer[:end], self.buffer[end + len(CLOSE) :]
                self.in_block = False
                out += self._end() if self.payload is not None else self._block(body, closed=True)
                self.payload, self.held = None, False
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

    def _stream(self, end: int) -> list[Delta]:
        """The open block's call as far as it is written (`end`: where the block closes, or -1); decides first
        whether it streams, once its head is complete."""
        out: list[Delta] = []
        if self.payload is None:
            head = _HEAD.match(self.buffer, 0, end if end >= 0 else len(self.buffer))
            if head is None:
                self.held = end >= 0  # closed without a streamable head: held, parsed whole
                return out
            started = self._start(_name(head.group(1)), head.group(2), self.buffer[head.end()])
            if started is None:
                self.held = True
                return out
            spec, self.payload = started
            out.append(ToolCallStart(spec.name, spec.kind, spec.namespace))
            self.buffer = self.buffer[head.end() :]
            end = self.buffer.find(CLOSE)
        if not self.payload.done:
            # Up to the block's end, less what may be the start of CLOSE.
            ready = end if end >= 0 else len(self.buffer) - _partial_suffix(self.buffer, CLOSE)
            text, used = self.payload.take(self.buffer[:ready])
            self.buffer = self.buffer[used:]
            if text:
                out.append(ToolCallDelta(text))
        return out

    def _start(self, name: str, key: str, first: str) -> tuple[ToolSpec, ObjectStream | StringStream] | None:
        """The call and its payload's reader when it streams: an offered tool (within `parallel_tool_calls`)
        whose payload is an object (a function's arguments) or a string (a freeform tool's input)."""
        spec = self.calls.tools.get(name)
        if spec is None or (self.calls.count and not self.calls.parallel):
            return None
        payload: ObjectStream | StringStream
        if spec.freeform and key != "parameters" and first == '"':
            payload = StringStream()
        elif not spec.freeform and key != "input" and first == "{":
            payload = ObjectStream()
        else:
            return None
        self.calls.count += 1
        return spec, payload

    def _text(self, text: str) -> list[Delta]:
        """Text outside blocks; whitespace alone before or between calls is dropped, not made a message."""
        return [TextDelta(text)] if text.strip() else []

    def _end(self) -> list[Delta]:
        """The streamed call's end: incomplete unless its payload (arguments object, input string) is whole."""
        assert self.payload is not None
        return [ToolCallEnd(incomplete=not self.payload.done)]

    def _block(self, body: str, closed: bool, cut: bool = False) -> list[Delta]:
        calls = self.calls.parse(body.strip())
        if calls:
            return self.calls.deltas(calls)
        return self.calls.cut_short(body.strip(), cut) or [TextDelta(OPEN + body + (CLOSE if closed else ""))]

    def finish(self, cut: bool = False) -> list[Delta]:
        if self.bare is not None:
            return self.bare.finish(cut)
        if self.in_block and self.payload is None and not self.held:
            self.held = True  # never streamed: parsed whole below
        if self.in_block and self.payload is not None:  # the call ends with what was written
            out = [] if self.payload.done else self._stream(len(self.buffer))
            end = self._end()
            self.buffer, self.payload, self.in_block = "", None, False
            return [*out, *end]
        rest, self.buffer = self.buffer, ""
        if self.in_block:  # generation stopped inside a block (a stop token, or the length limit)
            return self._block(rest, closed=False, cut=cut)
        if rest and (rest.strip() or self.calls.count == 0):
            return [TextDelta(rest)]
        return []


def _name(literal: str) -> str:
    try:
        name = json.loads(literal)
    except ValueError:
        return ""
    return name if isinstance(name, str) else ""


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker` (held until the next piece)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
