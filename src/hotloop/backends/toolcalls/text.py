"""Tool calls in a text model's output (docs/models.md): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.

`ToolCallParser` is fed text as it is generated. Text that cannot be the start of a call streams through at once;
text that may be a call is held until the end, then becomes calls if it parses and names offered tools, or is
released as plain text. A malformed call is never an error. `ToolCalls` (a call's JSON, the offered tools, one
call only without parallel calls) and `HeldCallParser` (hold or stream) also serve the `tokens` backend's parsers
(toolcalls/streaming.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from hotloop.backends.base import Delta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.chat.specs import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


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

    def deltas(self, calls: list[tuple[ToolSpec, str]]) -> list[Delta]:
        out: list[Delta] = []
        for spec, payload in calls:
            if self.count and not self.parallel:
                break  # parallel_tool_calls false: the first call only
            self.count += 1
            out += [ToolCallStart(spec.name, spec.kind, spec.namespace), ToolCallDelta(payload), ToolCallEnd()]
        return out


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

    def finish(self) -> list[Delta]:
        if self.held is None:
            return [TextDelta(self.start)] if self.start else []
        body = "".join(self.held)
        calls = self.parse(body)
        return self.calls.deltas(calls) if calls else [TextDelta(body)]


class ToolCallParser(HeldCallParser):
    """`<tool_call>` blocks, or a bare JSON call or list of calls, held whole to the end of the output."""

    def __init__(self, tools: Sequence[ToolSpec], parallel: bool) -> None:
        super().__init__(ToolCalls(tools, parallel))

    def holds(self, head: str) -> bool | None:
        if head == "[":  # "[" may open a JSON list of calls
            return None
        return OPEN.startswith(head[: len(OPEN)]) or head.startswith(("{", "[{"))

    def parse(self, text: str) -> list[tuple[ToolSpec, str]]:
        bodies = _BLOCK.findall(text) if OPEN in text else [text.strip()]
        calls = []
        for body in bodies:
            parsed = self.calls.parse(body)
            if parsed is None:
                return []  # one malformed block: the whole answer is plain text
            calls += parsed
        return calls
