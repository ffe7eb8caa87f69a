"""Tool calls in a text model's output (docs/models.md): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.

`ToolCallParser` is fed text as it is generated. Text that cannot be the start of a call streams through at once;
text that may be a call is held until the end, then becomes calls if it parses and names offered tools, or is
released as plain text. A malformed call is never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from hotloop.backends.base import Delta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart, ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


class ToolCallParser:
    def __init__(self, tools: Sequence[ToolSpec], parallel: bool) -> None:
        self._tools = {spec.prompt_name: spec for spec in tools}
        self._parallel = parallel
        self._held: list[str] | None = None  # None: still deciding; a list: holding a possible call
        self._start = ""
        self.streamed = False

    def feed(self, text: str) -> list[Delta]:
        if not self._tools:
            return [TextDelta(text)] if text else []
        if self._held is not None:
            self._held.append(text)
            return []
        if self.streamed:
            return [TextDelta(text)] if text else []
        self._start += text
        head = self._start.lstrip()
        if not head or head == "[":  # still deciding: "[" may open a JSON list of calls
            return []
        if OPEN.startswith(head[: len(OPEN)]) or head.startswith(("{", "[{")):
            self._held = [self._start]
            return []
        self.streamed = True
        text, self._start = self._start, ""
        return [TextDelta(text)]

    def finish(self) -> list[Delta]:
        held = "".join(self._held) if self._held is not None else self._start
        if not held:
            return []
        calls = self._parse(held) if self._held is not None else []
        if not calls:
            return [TextDelta(held)]
        out: list[Delta] = []
        for spec, payload in calls if self._parallel else calls[:1]:
            out += [
                ToolCallStart(spec.name, spec.kind, spec.namespace),
                ToolCallDelta(payload),
                ToolCallEnd(),
            ]
        return out

    def _parse(self, text: str) -> list[tuple[ToolSpec, str]]:
        bodies = _BLOCK.findall(text) if OPEN in text else [text.strip()]
        calls = []
        for body in bodies:
            try:
                data: Any = json.loads(body)
            except ValueError:
                return []  # one malformed block: the whole answer is plain text
            # A block may hold one call or, as some models write it, a JSON list of calls.
            for entry in data if isinstance(data, list) and data else [data]:
                call = self._call(entry)
                if call is None:
                    return []
                calls.append(call)
        return calls

    def _call(self, data: Any) -> tuple[ToolSpec, str] | None:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        spec = self._tools.get(data["name"])
        if spec is None:
            return None
        if spec.kind == "custom":
            value = data.get("input", "")
            return spec, value if isinstance(value, str) else json.dumps(value)
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        return spec, json.dumps(arguments)
