"""What rendering needs from outside a template: the tools offered to the model, and a tokenizer."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool offered to the model: a function (JSON-schema parameters), a custom (freeform) tool, or a tool of an
    MCP server the server runs (`mcp`: `namespace` is the server's label, `parameters` the tool's input schema),
    which the model sees and calls exactly as a function."""

    name: str
    kind: Literal["function", "custom", "mcp"] = "function"
    description: str | None = None
    parameters: dict[str, Any] | None = None
    namespace: str | None = None

    @property
    def prompt_name(self) -> str:
        """The name the model sees and calls: namespaced tools as `namespace.name`, so equal names stay apart."""
        return prompt_name(self.name, self.namespace)


def prompt_name(name: str, namespace: str | None) -> str:
    return f"{namespace}.{name}" if namespace else name


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...
