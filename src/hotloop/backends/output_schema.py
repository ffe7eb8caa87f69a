"""The JSON schema a response's output must follow (a forced tool call, a structured text format), for the
backends that constrain decoding to it: llama.cpp's grammar in-process, an upstream engine's JSON-schema option."""

from __future__ import annotations

from typing import Any

from hotloop.backends.base import GenerationRequest


def output_schema(request: GenerationRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow, if any: a call for `tool_choice` required (or a forced tool), else
    the `json_schema` / `json_object` text format when no tools are offered. None: free text."""
    if request.tools and request.tool_choice == "required":
        branches = []
        for spec in request.tools:
            if request.forced_tool is not None and spec.prompt_name != request.forced_tool:
                continue
            key = "input" if spec.freeform else "arguments"
            value: dict[str, Any] = {"type": "string"} if spec.freeform else spec.parameters or {"type": "object"}
            branches.append(
                {
                    "type": "object",
                    "properties": {"name": {"const": spec.prompt_name}, key: value},
                    "required": ["name", key],
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
