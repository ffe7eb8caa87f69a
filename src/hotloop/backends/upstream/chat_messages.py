"""Responses items ↔ Chat Completions messages, for backends that call an engine's /v1/chat/completions.

Calls of one assistant turn (parallel calls) go in one assistant message's `tool_calls`, each output in a `tool`
message after it; custom (freeform) tools are offered as functions taking `{"input": string}`; namespaced tools
are named `namespace__name` (chat APIs allow only [a-zA-Z0-9_-] in names). A reasoning item goes back as the
`reasoning_content` (or `reasoning`) of the assistant message after it, as the engines read it, by the upstream's
`reasoning_replay` policy (issue 13). MCP items go as the calls and outputs they stand for (chat/hosted.py),
converted here item by item so that the context keeps its own objects (backends/upstream/chat_json.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.hosted import LOWERED_TYPES, expand
from hotloop.chat.media import describe_file
from hotloop.chat.messages import compaction_text, other_item_text
from hotloop.chat.reasoning import ReplayPolicy, reasoning_text, replay_from
from hotloop.chat.specs import ToolSpec
from hotloop.tools.multi_agent import foreign
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputFile,
    InputImage,
    InputText,
    Message,
    OtherItem,
    OutputText,
    Reasoning,
    Refusal,
)

ChatMessage = dict[str, Any]
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def wire_name(name: str, namespace: str | None) -> str:
    return f"{namespace}__{name}" if namespace and namespace != name else name  # see tools/spec.py prompt_name


class Replay(msgspec.Struct, frozen=True):
    """Which reasoning items go back to the engine, and in which assistant-message field (docs/backends.md)."""

    policy: ReplayPolicy = "chain"  # chain: since the last user message (the tool chain in progress); all; none
    field: str = "reasoning_content"


DEFAULT_REPLAY = Replay()

# A reasoning item's text waits here for the assistant message that follows it (removed before encoding).
PENDING = "_reasoning"


def messages(request: GenerationRequest, replay: Replay = DEFAULT_REPLAY) -> list[ChatMessage]:
    """The conversation as chat messages: instructions first (as a system message), then the items."""
    out: list[ChatMessage] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    items = request.items
    start = replay_from(replay.policy, items)
    for index, item in enumerate(items):
        if isinstance(item, Reasoning) and index < start:
            continue  # reasoning outside what the engine is to read again
        if foreign(item):
            continue  # a subagent's item: the root's context never holds it (tools/multi_agent.py)
        append(out, item, f"input[{index}]", replay.field)
    return out


def append(out: list[ChatMessage], item: ContextItem, param: str, field: str = "reasoning_content") -> None:
    """Add `item` to the messages `out`, merging into the last one where one assistant turn continues; a reasoning
    item's text goes into `field` of the assistant message that follows it."""
    if type(item) in LOWERED_TYPES:
        for equivalent in expand(item):
            append(out, equivalent, param, field)
        return
    pending = out.pop()[PENDING] if out and PENDING in out[-1] else None
    if isinstance(item, Reasoning):
        text = reasoning_text(item)
        if text:
            out.append({PENDING: (pending or "") + text})
        return
    _append(out, item, param)
    if pending and out and out[-1]["role"] == "assistant" and not out[-1].get(field):
        out[-1][field] = pending


def _append(out: list[ChatMessage], item: ContextItem, param: str) -> None:
    if isinstance(item, Message):
        role = "system" if item.role == "developer" else item.role
        if role == "user":
            out.append({"role": role, "content": _content(item.content, param)})
            return
        text = _text(item.content, param)
        if role == "assistant" and out and out[-1]["role"] == "assistant" and not out[-1].get("tool_calls"):
            out[-1]["content"] = (out[-1]["content"] or "") + text  # one turn's messages stay one message
        else:
            out.append({"role": role, "content": text})
    elif isinstance(item, FunctionCall | CustomToolCall):
        arguments = item.arguments if isinstance(item, FunctionCall) else json.dumps({"input": item.input})
        call = {
            "id": item.call_id,
            "type": "function",
            "function": {"name": wire_name(item.name, item.namespace), "arguments": arguments},
        }
        if out and out[-1]["role"] == "assistant":
            out[-1].setdefault("tool_calls", []).append(call)  # parallel calls: one assistant message
        else:
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        output = item.output if isinstance(item.output, str) else _text(item.output, param)
        out.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
    elif isinstance(item, Compaction):
        out.append({"role": "user", "content": compaction_text(item)})
    elif isinstance(item, OtherItem):
        out.append({"role": "user", "content": other_item_text(item)})


def _text(parts: Iterable[Any], param: str) -> str:
    out = []
    for index, part in enumerate(parts):
        if isinstance(part, InputText | OutputText):
            out.append(part.text)
        elif isinstance(part, Refusal):
            out.append(part.refusal)
        elif isinstance(part, InputFile):
            out.append(describe_file(part, f"{param}.content[{index}]"))
        elif isinstance(part, InputImage):
            out.append("[image]")
    return "".join(out)


def _content(parts: list[Any], param: str) -> str | list[dict[str, Any]]:
    """A user message's content: a string, or parts when it carries images (vision engines take `image_url`)."""
    if not any(isinstance(part, InputImage) and part.image_url for part in parts):
        return _text(parts, param)
    out: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        if isinstance(part, InputImage) and part.image_url:
            image = {"url": part.image_url, **({"detail": part.detail} if part.detail else {})}
            out.append({"type": "image_url", "image_url": image})
        else:
            out.append({"type": "text", "text": _text([part], f"{param}.content[{index}]")})
    return out


def tools(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        function: dict[str, Any] = {"name": wire_name(spec.name, spec.namespace)}
        if spec.description:
            function["description"] = spec.description
        if spec.freeform:
            function["parameters"] = CUSTOM_INPUT
        else:
            function["parameters"] = spec.parameters or {"type": "object", "properties": {}}
        if spec.strict is not None:  # vLLM holds a strict tool's arguments to its schema (its structural tags)
            function["strict"] = spec.strict
        out.append({"type": "function", "function": function})
    return out


def tool_choice(request: GenerationRequest) -> str | dict[str, Any]:
    if request.forced_tool is not None:
        spec = next((spec for spec in request.tools if spec.prompt_name == request.forced_tool), None)
        name = wire_name(spec.name, spec.namespace) if spec is not None else request.forced_tool
        return {"type": "function", "function": {"name": name}}
    return request.tool_choice


def response_format(text_format: dict[str, Any]) -> dict[str, Any] | None:
    kind = text_format.get("type")
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {"name": text_format.get("name") or "output", "schema": text_format.get("schema") or {}}
        if text_format.get("strict") is not None:
            schema["strict"] = bool(text_format.get("strict"))
        return {"type": "json_schema", "json_schema": schema}
    return None


def tool_by_wire_name(specs: Iterable[ToolSpec]) -> dict[str, ToolSpec]:
    return {wire_name(spec.name, spec.namespace): spec for spec in specs}
