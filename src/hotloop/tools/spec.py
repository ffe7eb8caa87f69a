"""`ToolSpec`: a tool as offered to the model, whatever its kind."""

from __future__ import annotations

from typing import Any

import msgspec

from hotloop.tools.grammar import Grammar


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool offered to the model: a function (JSON-schema parameters), a custom (freeform) tool, a tool of an MCP
    server the server runs (`mcp`: `namespace` is the server's label, `parameters` the tool's input schema), or a
    typed tool the client runs (`shell`, `local_shell`, `apply_patch`, `computer`: hotloop/tools/), which the model
    sees and calls exactly as a function. Only `custom` takes text; every other kind takes a JSON object."""

    name: str
    kind: str = "function"  # function | custom | mcp | a typed client tool's type
    description: str | None = None
    parameters: dict[str, Any] | None = None
    namespace: str | None = None
    grammar: Grammar | None = None  # a custom tool's `format` grammar: its input must match it
    strict: bool | None = None  # a function's `strict`, as the request gave it (a chat API's engine may enforce it)

    @property
    def prompt_name(self) -> str:
        """The name the model sees and calls: namespaced tools as `namespace.name`, so equal names stay apart."""
        return prompt_name(self.name, self.namespace)

    @property
    def freeform(self) -> bool:
        """The call's payload is text (a custom tool's `input`), not a JSON object of arguments."""
        return self.kind == "custom"


def prompt_name(name: str, namespace: str | None) -> str:
    """`namespace.name`; a deferred top-level tool's calls carry its own name as their namespace (as OpenAI's do,
    and the Agents SDK looks such a tool up by it), which the model never sees."""
    return f"{namespace}.{name}" if namespace and namespace != name else name
