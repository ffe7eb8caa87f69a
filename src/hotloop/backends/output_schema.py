"""The JSON schema a response's output must follow (a forced tool call, a structured text format), for the
backends that constrain decoding to it: llama.cpp's grammar in-process, an upstream engine's JSON-schema option."""

from __future__ import annotations

from typing import Any

from hotloop.backends.base import GenerationRequest
from hotloop.chat.specs import ToolSpec


def _input(spec: ToolSpec) -> dict[str, Any]:
    """A custom tool's input as a JSON string; a regex grammar is its pattern (matched whole, as OpenAI matches it;
    the escaping inside the JSON string is the schema compiler's). A Lark grammar cannot be a JSON schema: the
    server checks the input against it once written (tools/grammar.py)."""
    grammar = spec.grammar
    if grammar is not None and grammar.syntax == "regex":
        return {"type": "string", "pattern": f"^({grammar.definition})$"}
    return {"type": "string"}


def output_schema(request: GenerationRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow, if any: a call for `tool_choice` required (or a forced tool), else
    the `json_schema` / `json_object` text format when no tools are offered. None: free text."""
    if request.tools and request.tool_choice == "required":
        branches = []
        for spec in request.tools:
            if request.forced_tool is not None and spec.prompt_name != request.forced_tool:
                continue
            key = "input" if spec.freeform else "arguments"
            value: dict[str, Any] = _input(spec) if spec.freeform else spec.parameters or {"type": "object"}
            branches.append(
                {
                    "type": "object",
                    "properties": {"name": {"const": spec.prompt_name}, key: value},
                    "required": ["name", key],
                    "additionalProperties": False,  # the call, nothing beside it
                }
            )
        if branches:
            return branches[0] if len(branches) == 1 else {"anyOf": branches}
        return None
    if request.tools:
        return None
    fmt = request.text_format
    if fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        schema: dict[str, Any] = fmt["schema"]
        return schema
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    return None
