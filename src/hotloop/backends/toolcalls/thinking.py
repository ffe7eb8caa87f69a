"""Reasoning in generated text, parsed as the text streams (the `tokens` backend's `reasoning_parser` setting):
`<think>…</think>` (Qwen3, DeepSeek-R1, GLM). The thinking becomes `ReasoningDelta`s as it arrives; what follows
`</think>` goes to the tool-call parser (toolcalls/streaming.py), so calls after the reasoning keep working. A
template that opens the block in its generation prompt (DeepSeek-R1's, Qwen3's thinking mode on some engines)
makes the output start inside it: `open_in_prompt`.
"""

from __future__ import annotations

from hotloop.backends.base import Delta, ReasoningDelta
from hotloop.backends.toolcalls.streaming import ToolParser
from hotloop.chat.reasoning import THINK_CLOSE as CLOSE
from hotloop.chat.reasoning import THINK_OPEN as OPEN


def _partial(text: str, tag: str) -> int:
    """How many of `text`'s last characters could start `tag` (held until the next piece decides)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ThinkParser:
    def __init__(self, inner: ToolParser, open_in_prompt: bool = False) -> None:
        self.inner = inner
        self.state = "think" if open_in_prompt else "start"
        self.buffer = ""

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        if self.state == "start" and not self._opened():
            return []
        if self.state == "think":
            return self._think()
        return self._answer()

    def _answer(self) -> list[Delta]:
        if self.state == "after":  # the blank lines after `</think>` belong to neither side
            self.buffer = self.buffer.lstrip("\n")
            if not self.buffer:
                return []
            self.state = "answer"
        text, self.buffer = self.buffer, ""
        return self.inner.feed(text) if text else []

    def _opened(self) -> bool:
        """Whether the output's start is decided: into the think block, or straight to the answer."""
        head = self.buffer.lstrip()
        if not head or (OPEN.startswith(head) and len(head) < len(OPEN)):
            return False  # nothing yet, or perhaps the start of <think>
        if head.startswith(OPEN):
            self.buffer, self.state = head[len(OPEN) :], "think"
        else:
            self.state = "answer"
        return True

    def _think(self) -> list[Delta]:
        end = self.buffer.find(CLOSE)
        if end < 0:
            keep = _partial(self.buffer, CLOSE)
            thought, self.buffer = self.buffer[: len(self.buffer) - keep], self.buffer[len(self.buffer) - keep :]
            return [ReasoningDelta(thought)] if thought else []
        thought, self.buffer, self.state = self.buffer[:end], self.buffer[end + len(CLOSE) :], "after"
        out: list[Delta] = [ReasoningDelta(thought)] if thought else []
        return out + self._answer()

    def finish(self, cut: bool = False) -> list[Delta]:
        out: list[Delta] = []
        rest, self.buffer = self.buffer, ""
        if self.state == "after":
            rest = rest.lstrip("\n")
        if rest:
            out = [ReasoningDelta(rest)] if self.state == "think" else self.inner.feed(rest)
        return out + self.inner.finish(cut)
