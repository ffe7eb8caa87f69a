"""What the MCP tests share (test_mcp_items.py, test_builder_mcp.py): checks that what hotloop sends is what
openai-python 3.57 types, field for field, and the Open Responses schema (tests/schema.py) around it."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from openai.types.responses import ResponseInputItem, ResponseOutputItem, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from hotloop.wire.events import Event
from schema import check_event


@cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    union = {"event": ResponseStreamEvent, "output": ResponseOutputItem, "input": ResponseInputItem}[kind]
    return TypeAdapter(union)


def _no_extra(model: Any, where: str) -> None:
    """Every key is a field openai-python declares (its models keep unknown keys in `model_extra`, silently)."""
    if isinstance(model, BaseModel):
        assert not model.model_extra, f"{where}: fields openai-python does not type: {model.model_extra}"
        for name in type(model).model_fields:
            _no_extra(getattr(model, name), f"{where}.{name}")
    elif isinstance(model, list):
        for index, inner in enumerate(model):
            _no_extra(inner, f"{where}[{index}]")


def openai_typed(kind: str, raw: dict[str, Any]) -> Any:
    """`raw` validated as openai-python's `kind` union ("event", "output" or "input" item); returns the model.
    MCP events and items are held to the SDK's exact fields; others may carry more (a lifecycle event's response
    has Open Responses' fields, protocol.md §1.6; `function_call_arguments.done` has `name`, §2.5)."""
    model = _adapter(kind).validate_python(raw)
    if "response" in raw:
        for item in raw["response"]["output"]:
            openai_typed("output", item)
    elif "mcp" in raw["type"] or "mcp" in raw.get("item", {}).get("type", ""):
        _no_extra(model, raw["type"])
    if kind != "input":
        assert model.type == raw["type"]
    return model


def checked(events: list[Event]) -> list[dict[str, Any]]:
    """The events as JSON, each checked against openai-python's event types and the Open Responses schema."""
    out = []
    for event in events:
        raw = json.loads(event.data)
        assert raw["type"] == event.type
        check_event(raw)
        if not raw["type"].startswith("hotloop:"):
            openai_typed("event", raw)
        out.append(raw)
    return out
