"""gpt-oss's harmony format in generated text (`reasoning_parser = "harmony"`): its channels become items as they
stream.

The generation prompt ends with `<|start|>assistant` (chat/harmony.py). The output is one or more messages, each a
header — `<|channel|>analysis`, `<|channel|>commentary to=functions.get_weather <|constrain|>json`,
`<|channel|>final`, the recipient sometimes before the channel (` to=functions.x<|channel|>commentary json`) —
then `<|message|>`, the body, and `<|end|>` (another message follows, after `<|start|>assistant`), `<|call|>` (a
tool call) or `<|return|>` (the answer). An engine leaves the special tokens in its text only when asked
(`skip_special_tokens: false`, which the `tokens` backend sends).

- `analysis`: ReasoningDelta.
- `commentary` to an offered tool (`functions.NAME`): ToolCallStart once the header is read, the body (the
  arguments, or a freeform tool's input) as ToolCallDeltas as it is written, ToolCallEnd at its end.
- `final`, a `commentary` preamble without a recipient, and a message to a tool that was not offered: TextDelta.
- Output with no harmony markers at all (an engine that dropped them) streams as text.
"""

from __future__ import annotations

import re

from hotloop.backends.base import Delta, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.toolcalls.text import ToolCalls

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
_TERMINATORS = (END, CALL, RETURN, START)  # a body ends at the first of these
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


class HarmonyParser:
    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls
        self.buffer = ""
        self.state = "header"  # header → body → header …; "plain": no markers, everything is text
        self.kind = "text"  # the open body's: reasoning, text, call, dropped
        self.started = False  # a header has begun (the output is harmony)

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        out: list[Delta] = []
        while self.buffer:
            if self.state == "plain":
                text, self.buffer = self.buffer, ""
                return [*out, TextDelta(text)]
            if self.state == "header":
                if not self._header(out):
                    return out
            elif not self._body(out):
                return out
        return out

    def _header(self, out: list[Delta]) -> bool:
        """Read a header once it is whole; False while it is not."""
        if not self.started:
            head = self.buffer.lstrip()
            # A first header opens with a marker, or with the recipient (` to=functions.x<|channel|>…`).
            if head and not ("<|".startswith(head[:2]) or "to=".startswith(head[:3])):
                self.state = "plain"  # the engine sends no markers: plain text
                return True
        at = self.buffer.find(MESSAGE)
        if at < 0:
            return False
        header, self.buffer = self.buffer[:at], self.buffer[at + len(MESSAGE) :]
        self.started, self.state = True, "body"
        self.kind = self._open(header, out)
        return True

    def _open(self, header: str, out: list[Delta]) -> str:
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        if recipient is not None:
            name = recipient.group(1).removeprefix("functions.")
            spec = self.calls.tools.get(name)
            if spec is None:
                return "text"
            if self.calls.count and not self.calls.parallel:
                return "dropped"  # parallel_tool_calls false: the first call only
            self.calls.count += 1
            out.append(ToolCallStart(spec.name, spec.kind, spec.namespace))
            return "call"
        return "reasoning" if channel is not None and channel.group(1) == "analysis" else "text"

    def _body(self, out: list[Delta]) -> bool:
        """Pass the body on as far as it is surely body; True when it ended."""
        ends = [(at, marker) for marker in _TERMINATORS if (at := self.buffer.find(marker)) >= 0]
        if not ends:
            ready = len(self.buffer) - _partial_marker(self.buffer)
            self._emit(self.buffer[:ready], out)
            self.buffer = self.buffer[ready:]
            return False
        at, marker = min(ends)
        self._emit(self.buffer[:at], out)
        # `<|start|>` begins the next message's header (the role and perhaps the recipient): kept for it.
        self.buffer = self.buffer[at:] if marker == START else self.buffer[at + len(marker) :]
        self._close(out)
        return True

    def _emit(self, text: str, out: list[Delta]) -> None:
        if not text or self.kind == "dropped":
            return
        if self.kind == "reasoning":
            out.append(ReasoningDelta(text))
        elif self.kind == "call":
            out.append(ToolCallDelta(text))
        else:
            out.append(TextDelta(text))

    def _close(self, out: list[Delta], cut: bool = False) -> None:
        if self.kind == "call":
            out.append(ToolCallEnd(incomplete=cut))
        self.state, self.kind = "header", "text"

    def finish(self, cut: bool = False) -> list[Delta]:
        """`cut`: the length limit stopped the output, so a call still open is incomplete (an engine leaves the
        `<|call|>` that ends a whole one out, so its absence alone says nothing)."""
        out: list[Delta] = []
        rest, self.buffer = self.buffer, ""
        if self.state == "body":  # the engine stopped without the terminator (it leaves the stop token out)
            self._emit(rest, out)
            self._close(out, cut)
        elif self.state == "plain" or (rest.strip() and not self.started and not any(m in rest for m in MARKERS)):
            out.append(TextDelta(rest))
        return out


def _partial_marker(text: str) -> int:
    """How many of `text`'s last characters may begin a marker (held until the next piece decides)."""
    start = text.rfind("<", max(0, len(text) - 12))
    if start < 0:
        return 0
    tail = text[start:]
    return len(tail) if any(marker.startswith(tail) for marker in MARKERS) else 0
