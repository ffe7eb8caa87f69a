"""Validate what the server sends against the Open Responses schema (../shared/spec), as protocol.md asks."""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "openresponses-2026-04-24.openapi.json"
URI = "urn:openresponses"
# Event types hotloop sends that the OR schema does not define (protocol.md §2.5, §3.6): checked by the tests
# that produce them, not by the schema.
EXTENSION_EVENTS = frozenset(
    {
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.steer.accepted",
        "response.steer.pending",
        "response.steer.failed",
        "hotloop:timing_metrics",
        # MCP tools run by the server (protocol.md §1.10): OpenAI's events, which OR does not define.
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        # A shell call's commands (protocol.md §1.11): OpenAI's events, which OR does not define.
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        # A hosted shell's output (docs/code-interpreter.md, "Hosted shell"): OpenAI's events, which OR does not define.
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        # A compaction_trigger's compaction under way, an inject's replies (protocol.md §1.12): OpenAI's events,
        # which OR does not define.
        "response.compaction.compacting",
        "response.inject.created",
        "response.inject.failed",
        # A file search the server runs (docs/file-search.md): OpenAI's events, which OR does not define.
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        # Code the server runs (docs/code-interpreter.md): OpenAI's events, which OR does not define.
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    }
)
# Output item types OR has no schema for (its `ItemField` is message, function call and output, reasoning,
# compaction): MCP items (protocol.md §1.10) and the typed tools' (§1.11), checked against openai-python's types
# by the tests that make them.
# The schema checks everything around them: an `output_item` event as one with a null item (which OR allows), a
# response without them in its output.
EXTENSION_ITEMS = frozenset(
    {
        "mcp_list_tools",
        "mcp_call",
        "mcp_approval_request",
        # The typed client tools' calls and the tool search's items (protocol.md §1.11).
        "shell_call",
        "local_shell_call",
        "apply_patch_call",
        "computer_call",
        "tool_search_call",
        "tool_search_output",
        # A multi-agent response's subagent items (protocol.md §1.12): openai-python's beta union checks them.
        "multi_agent_call",
        "multi_agent_call_output",
        "agent_message",
        # A file search the server ran (docs/file-search.md): openai-python's ResponseFileSearchToolCall.
        "file_search_call",
        # Code the server ran (docs/code-interpreter.md): openai-python's ResponseCodeInterpreterToolCall.
        "code_interpreter_call",
        # A hosted shell's answer, made by the server (docs/code-interpreter.md, "Hosted shell").
        "shell_call_output",
    }
)
# Tools OR has no schema for (its `tools` are function tools only), echoed as sent (protocol.md §1.4): left out of
# what the schema checks, like the items.
EXTENSION_TOOLS = frozenset(
    {
        "mcp",
        "shell",
        "local_shell",
        "apply_patch",
        "computer",
        "computer_use_preview",
        "tool_search",
        "file_search",
        "code_interpreter",
    }
)
# `tool_choice` objects OR has no schema for: OpenAI's `{type: "mcp", server_label, name?}` (docs/mcp.md), echoed as
# sent; the schema checks the response as if it were "required", what it asks of the model.
EXTENSION_TOOL_CHOICES = frozenset(
    {
        "mcp",
        "shell",
        "local_shell",
        "apply_patch",
        "computer",
        "computer_use_preview",
        "tool_search",
        "file_search",
        "code_interpreter",
    }
)
# Annotations OR has no schema for (its `Annotation` is `url_citation` only): a file search's `file_citation`
# (openai-python's AnnotationFileCitation), left out of what the schema checks.
EXTENSION_ANNOTATIONS = frozenset({"file_citation"})


@cache
def _document() -> dict[str, Any] | None:
    if SPEC.exists():
        document: dict[str, Any] = json.loads(SPEC.read_text())
        return document
    if os.environ.get("CI"):
        raise AssertionError(f"CI=true but the Open Responses schema is missing at {SPEC}")
    return None


def _require() -> dict[str, Any]:
    document = _document()
    if document is None:
        pytest.skip(f"schema checks need {SPEC} (../shared is absent in this clone and CI is unset)")
    return document


@cache
def _registry() -> Registry:
    return Registry().with_resource(URI, Resource.from_contents(_require(), default_specification=DRAFT202012))


@cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{URI}#/components/schemas/{name}"}, registry=_registry())


@cache
def _event_schemas() -> dict[str, str]:
    document = _require()
    stream = document["paths"]["/responses"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    out: dict[str, str] = {}
    for ref in stream["oneOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        out[document["components"]["schemas"][name]["properties"]["type"]["enum"][0]] = name
    return out


def _strip_json_schema(response: dict[str, Any]) -> dict[str, Any]:
    """OR quirk (protocol.md §1.6): its response-side json_schema format admits only a null `schema`."""
    fmt = response.get("text", {}).get("format", {})
    if fmt.get("type") == "json_schema" and fmt.get("schema") is not None:
        response = copy.deepcopy(response)
        response["text"]["format"]["schema"] = None
    return response


def _without_extension_annotations(part: Any) -> Any:
    annotations = part.get("annotations") if isinstance(part, dict) else None
    if not isinstance(annotations, list) or not any(a.get("type") in EXTENSION_ANNOTATIONS for a in annotations):
        return part
    return {**part, "annotations": [a for a in annotations if a.get("type") not in EXTENSION_ANNOTATIONS]}


def _plain_item(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if item.get("type") != "message" or not isinstance(content, list):
        return item
    return {**item, "content": [_without_extension_annotations(part) for part in content]}


def _without_extension_items(response: dict[str, Any]) -> dict[str, Any]:
    output, tools = response.get("output"), response.get("tools")
    if isinstance(output, list):
        kept = [_plain_item(item) for item in output if item.get("type") not in EXTENSION_ITEMS]
        response = {**response, "output": kept}
    if isinstance(tools, list) and any(tool.get("type") in EXTENSION_TOOLS for tool in tools):
        response = {**response, "tools": [tool for tool in tools if tool.get("type") not in EXTENSION_TOOLS]}
    choice = response.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in EXTENSION_TOOL_CHOICES:
        response = {**response, "tool_choice": "required"}
    return response


def check_response(response: dict[str, Any]) -> None:
    _validator("ResponseResource").validate(_without_extension_items(_strip_json_schema(response)))


# OpenAI's names for the raw reasoning text's events (protocol.md §2.6, `reasoning_events = "openai"`): the same
# shape as Open Responses' `response.reasoning.delta` / `.done`, so they are validated as those.
OPENAI_ALIASES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}


def check_event(event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind in EXTENSION_EVENTS:
        return
    if kind in OPENAI_ALIASES:
        kind = OPENAI_ALIASES[kind]
        event = {**event, "type": kind}
    schemas = _event_schemas()
    assert kind in schemas, f"event type {kind!r} is neither in the OR schema nor a documented extension"
    if "response" in event:
        event = {**event, "response": _without_extension_items(_strip_json_schema(event["response"]))}
    if isinstance(event.get("item"), dict) and event["item"].get("type") in EXTENSION_ITEMS:
        event = {**event, "item": None}
    elif isinstance(event.get("item"), dict):
        event = {**event, "item": _plain_item(event["item"])}
    if isinstance(event.get("part"), dict):
        event = {**event, "part": _without_extension_annotations(event["part"])}
    annotation = event.get("annotation")
    if isinstance(annotation, dict) and annotation.get("type") in EXTENSION_ANNOTATIONS:
        event = {**event, "annotation": None}
    _validator(schemas[kind]).validate(event)


def check_ws_error(frame: dict[str, Any]) -> None:
    _validator("WebSocketErrorEvent").validate(frame)
