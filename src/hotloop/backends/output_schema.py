"""The JSON schema a response's output must follow (a forced tool call, a structured text format), for the
backends that constrain decoding to it: llama.cpp's grammar in-process, an upstream engine's JSON-schema option."""

from __future__ import annotations

from typing import Any

from hotloop.backends.base import GenerationRequest
from hotloop.chat.specs import ToolSpec
from hotloop.tools.lark_regex import lark_to_regex


def _input(spec: ToolSpec) -> dict[str, Any]:
    """A custom tool's input as a JSON string; a regex grammar, or a Lark grammar without recursion (Codex's
    `apply_patch`: tools/lark_regex.py), is its pattern, matched whole as OpenAI matches it (the escaping inside the
    JSON string is the schema compiler's). Any other Lark grammar is checked once the input is written."""
    grammar = spec.grammar
    if grammar is None:
        return {"type": "string"}
    pattern = grammar.definition if grammar.syntax == "regex" else lark_to_regex(grammar.definition)
    return {"type": "string", "pattern": f"^({pattern})$"} if pattern is not None else {"type": "string"}


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
