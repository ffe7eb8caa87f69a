"""Tool calls in a text model's output (docs/models.md): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.

`ToolCallParser` is fed text as it is generated. Text that cannot be the start of a call streams through at once;
text that may be a call is held until the end, then becomes calls if it parses and names offered tools. A call to an
offered tool that does not parse (cut short by the length limit, or malformed) becomes that call with what was
written, ended `incomplete`: the model's call syntax is never shown as a message. Anything else held is released as
plain text. A malformed call is never an error. `ToolCalls` (a call's JSON, the offered tools, one
call only without parallel calls) and `HeldCallParser` (hold or stream) also serve the `tokens` backend's parsers
(toolcalls/streaming.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from hotloop.backends.base import Delta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.toolcalls.arguments import ObjectStream, StringStream
from hotloop.chat.specs import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
# A call's name as far as it is written: the closing quote is missing when the output ended inside it.
_NAME = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)(")?')
_PAYLOAD = re.compile(r'\s*,\s*"(arguments|parameters|input)"\s*:\s*')


class ToolCalls:
    """Offered tools by the name the model sees, and the calls emitted so far (one only without parallel calls)."""

    def __init__(self, tools: Sequence[ToolSpec], parallel: bool) -> None:
        self.tools = {spec.prompt_name: spec for spec in tools}
        self.parallel = parallel
        self.count = 0

    def parse(self, body: str) -> list[tuple[ToolSpec, str]] | None:
        """A call or a list of calls as JSON; None when it is not one (then it is text)."""
        try:
            data: Any = json.loads(body)
        except ValueError:
            return None
        calls = []
        # A block may hold one call or, as some models write it, a JSON list of calls.
        for entry in data if isinstance(data, list) and data else [data]:
            call = self._call(entry)
            if call is None:
                return None
            calls.append(call)
        return calls

    def _call(self, data: Any) -> tuple[ToolSpec, str] | None:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        spec = self.tools.get(data["name"])
        if spec is None:
            return None
        if spec.freeform:
            value = data.get("input", data.get("arguments", ""))
            return spec, value if isinstance(value, str) else json.dumps(value)
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        return spec, json.dumps(arguments)

    def deltas(self, calls: list[tuple[ToolSpec, str]], incomplete: bool = False) -> list[Delta]:
        """The calls' deltas; `incomplete`: the last one was cut short (`unfinished`)."""
        out: list[Delta] = []
        for number, (spec, payload) in enumerate(calls, 1):
            if self.count and not self.parallel:
                break  # parallel_tool_calls false: the first call only
            self.count += 1
            end = ToolCallEnd(incomplete=incomplete and number == len(calls))
            out += [ToolCallStart(spec.name, spec.kind, spec.namespace), ToolCallDelta(payload), end]
        return out

    def unfinished(self, body: str, cut: bool) -> tuple[ToolSpec, str] | None:
        """A call that does not parse, read as far as it was written: its offered tool and its payload so far (a
        freeform tool's input decoded, a function's arguments as written). The name must be whole, or, when the
        output was `cut` inside it, the start of exactly one offered tool's name. None: it is not a call."""
        head = _NAME.match(body)
        if head is None:
            return None
        name = _decoded(head.group(1))
        spec = self.tools.get(name) if head.group(2) else None
        if spec is None and cut and not head.group(2) and head.end() == len(body):
            started = [tool for prompt_name, tool in self.tools.items() if prompt_name.startswith(name)]
            spec = started[0] if len(started) == 1 else None
        if spec is None:
            return None
        payload = _PAYLOAD.match(body, head.end())
        if payload is None:
            return spec, ""
        rest = body[payload.end() :]
        if rest.startswith('"'):  # a freeform tool's input, or arguments some models write as a JSON string
            return spec, StringStream().take(rest)[0]
        if rest.startswith("{"):
            return spec, ObjectStream().take(rest)[0]
        return spec, rest.rstrip().removesuffix("}")  # something else, as written, less the call's closing brace

    def cut_short(self, body: str, cut: bool) -> list[Delta]:
        """The deltas of `unfinished`'s call, ended `incomplete`; empty when `body` is not a call."""
        call = self.unfinished(body, cut)
        return self.deltas([call], incomplete=True) if call is not None else []


def _decoded(literal: str) -> str:
    """A JSON string's text (without its quotes), as far as it decodes."""
    text, _ = StringStream().take('"' + literal)
    return text


class HeldCallParser:
    """Output that may be a call is held to the end, then becomes calls or is released as text; other output
    streams through at once. A subclass says what may start a call and how held output parses."""

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls
        self.held: list[str] | None = None  # a possible call, held to the end
        self.start = ""  # leading text while undecided
        self.streamed = False

    def holds(self, head: str) -> bool | None:
        """Whether output starting with `head` (stripped, not empty) may be a call; None: too soon to tell."""
        raise NotImplementedError

    def parse(self, text: str) -> list[tuple[ToolSpec, str]] | None:
        """The held output's calls; None or empty when it is text."""
        raise NotImplementedError

    def feed(self, text: str) -> list[Delta]:
        if not self.calls.tools:
            return [TextDelta(text)] if text else []
        if self.held is not None:
            self.held.append(text)
            return []
        if self.streamed:
            return [TextDelta(text)] if text else []
        self.start += text
        head = self.start.lstrip()
        decision = self.holds(head) if head else None
        if decision is None:
            return []
        if decision:
            self.held = [self.start]
            return []
        self.streamed = True
        text, self.start = self.start, ""
        return [TextDelta(text)]

    def unfinished(self, text: str, cut: bool) -> list[Delta]:
        """The held output as calls when it is calls to offered tools of which the last does not parse (cut short,
        or malformed): that one ends `incomplete`. Empty when it is not."""
        return self.calls.cut_short(text.strip(), cut)

    def finish(self, cut: bool = False) -> list[Delta]:
        """The end of the output; `cut`: the length limit stopped it."""
        if self.held is None:
            return [TextDelta(self.start)] if self.start else []
        body = "".join(self.held)
        calls = self.parse(body)
        if calls:
            return self.calls.deltas(calls)
        return self.unfinished(body, cut) or [TextDelta(body)]


class ToolCallParser(HeldCallParser):
    """`<tool_call>` blocks, or a bare JSON call or list of calls, held whole to the end of the output."""

    def __init__(self, tools: Sequence[ToolSpec], parallel: bool) -> None:
        super().__init__(ToolCalls(tools, parallel))

    def holds(self, head: str) -> bool | None:
        if head == "[":  # "[" may open a JSON list of calls
            return None
        return OPEN.startswith(head[: len(OPEN)]) or head.startswith(("{", "[{"))

    def parse(self, text: str) -> list[tuple[ToolSpec, str]]:
        calls = []
        for body in _bodies(text):
            parsed = self.calls.parse(body)
            if parsed is None:
                return []  # one malformed block: the whole answer is plain text (or `unfinished`)
            calls += parsed
        return calls

    def unfinished(self, text: str, cut: bool) -> list[Delta]:
        """Blocks that parse, then a last one that does not but is a call to an offered tool."""
        *whole, last = _bodies(text)
        calls = [self.calls.parse(body) for body in whole]
        call = self.calls.unfinished(last, cut)
        if call is None or any(parsed is None for parsed in calls):
            return []
        return self.calls.deltas([*(found for parsed in calls if parsed for found in parsed), call], incomplete=True)


def _bodies(text: str) -> list[str]:
    """The call bodies of a held output: its `<tool_call>` blocks, or the whole output as one bare call."""
    return _BLOCK.findall(text) if OPEN in text else [text.strip()]
