"""What a model writes, as text: hotloop-sim's deltas in a model family's output format (`--output-format`), the
text of a completion prompt's output (/v1/completions, /generate, /completion)."""

from __future__ import annotations

import json
from typing import Protocol

from hotloop.backends.base import Delta, Finished, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart


class TextWriter(Protocol):
    def __call__(self, delta: Delta) -> str: ...


def writer(output_format: str) -> TextWriter:
    return HarmonyText() if output_format == "harmony" else HermesText()


class HermesText:
    """Deltas as generated text, tool calls as `<tool_call>` blocks, reasoning in a `<think>` block: what a
    Hermes-style reasoning model (Qwen3) writes."""

    def __init__(self) -> None:
        self.calls = 0
        self.custom = False  # the open call is a custom tool's: its raw text pieces go in a JSON string
        self.thinking = False

    def __call__(self, delta: Delta) -> str:
        if isinstance(delta, ReasoningDelta):
            head = "" if self.thinking else "<think>"
            self.thinking = True
            return head + delta.text
        if self.thinking and not isinstance(delta, Finished):
            self.thinking = False
            return "</think>\n\n" + self(delta)
        if isinstance(delta, TextDelta):
            return delta.text
        if isinstance(delta, ToolCallStart):
            name = delta.name if delta.namespace is None else f"{delta.namespace}.{delta.name}"
            self.custom = delta.kind == "custom"
            head = ("\n" if self.calls else "") + '<tool_call>\n{"name": ' + json.dumps(name)
            self.calls += 1
            return head + (', "input": "' if self.custom else ', "arguments": ')
        if isinstance(delta, ToolCallDelta):
            return json.dumps(delta.text)[1:-1] if self.custom else delta.text
        if isinstance(delta, ToolCallEnd):
            return ('"' if self.custom else "") + "}\n</tool_call>"
        return ""


class HarmonyText:
    """What gpt-oss writes after its generation prompt `<|start|>assistant`: its thinking on the `analysis`
    channel, a call on `commentary` to `functions.NAME` ended by `<|call|>`, the answer on `final` ended by
    `<|return|>`; each message after the first opens with `<|start|>assistant` (chat/harmony.py renders the same)."""

    def __init__(self) -> None:
        self.open: str | None = None  # the channel of the message being written
        self.messages = 0

    def __call__(self, delta: Delta) -> str:
        if isinstance(delta, ReasoningDelta | TextDelta):
            channel = "analysis" if isinstance(delta, ReasoningDelta) else "final"
            if self.open == channel:
                return delta.text
            return self._close() + self._begin(channel, f"<|channel|>{channel}") + delta.text
        if isinstance(delta, ToolCallStart):
            name = delta.name if delta.namespace is None else f"{delta.namespace}.{delta.name}"
            header = f"<|channel|>commentary to=functions.{name}" + (
                "" if delta.kind == "custom" else " <|constrain|>json"
            )
            return self._close() + self._begin("call", header)
        if isinstance(delta, ToolCallDelta):
            return delta.text
        if isinstance(delta, ToolCallEnd):
            self.open = None
            return "<|call|>"
        if isinstance(delta, Finished):
            return self._close(last=True)
        return ""

    def _begin(self, channel: str, header: str) -> str:
        self.open = channel
        self.messages += 1
        return ("<|start|>assistant" if self.messages > 1 else "") + header + "<|message|>"

    def _close(self, last: bool = False) -> str:
        channel, self.open = self.open, None
        if channel is None:
            return ""
        return "<|return|>" if last and channel == "final" else "<|end|>"
