"""What rendering needs from outside a template: the tools offered to the model (hotloop/tools/), and a tokenizer."""

from __future__ import annotations

from typing import Protocol

from hotloop.tools.spec import ToolSpec, prompt_name

__all__ = ["Tokenizer", "ToolSpec", "prompt_name"]


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...
