"""MCP items, and the typed client tools' items, as the function calls and outputs every dialect already renders
(protocol.md §1.10, §1.11).

A typed tool's call and output read as the function call and output of the function it is offered as
(hotloop/tools/: each kind's `lower`).

The model called an MCP tool as a function (`label.tool`), so its history reads back as one: an `mcp_call` is the
call and its output; an `mcp_approval_request` is the call (the model wrote it) and the answer comes later, a
refusal as the call's output, an approval as the `mcp_call` that ran it (its output only: the call is the
request's). A tool listing is not shown: its tools are in the system message. The item's id is the call id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from hotloop.tools import multi_agent
from hotloop.tools.registry import BY_ITEM, TYPED_ITEM_TYPES
from hotloop.tools.tool_search import added_message
from hotloop.wire.agent_items import AGENT_ITEMS
from hotloop.wire.items import (
    ContextItem,
    FunctionCall,
    FunctionCallOutput,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
)
from hotloop.wire.tool_items import AdditionalTools

MCP_TYPES = frozenset({McpListTools, McpCall, McpApprovalRequest, McpApprovalResponse})
AGENT_TYPES = frozenset(AGENT_ITEMS)
LOWERED_TYPES = MCP_TYPES | TYPED_ITEM_TYPES | AGENT_TYPES | {AdditionalTools}
REFUSED = "The user refused this call."
NOT_RUN = "The call did not complete."


def has_lowered(items: Sequence[ContextItem]) -> bool:
    # Exact types, not isinstance, looked up in C: this runs over whole contexts (about 4 ms per 100k items).
    return not LOWERED_TYPES.isdisjoint(map(type, items))


def as_calls(items: Sequence[ContextItem]) -> Sequence[ContextItem]:
    """`items` with each MCP, typed tool or multi-agent item replaced by its calls and outputs; `items` itself (not a
    copy) when there is none. A multi-agent response's subagents' items are left out (the root's context never
    holds them, tools/multi_agent.py): its spawn calls are there wherever a subagent's items are."""
    if not has_lowered(items):
        return items
    subagents = not AGENT_TYPES.isdisjoint(map(type, items))
    out: list[ContextItem] = []
    for item in items:
        if subagents and multi_agent.foreign(item):
            continue
        if type(item) in LOWERED_TYPES:
            out.extend(expand(item))
        else:
            out.append(item)
    return out


def expand(item: ContextItem) -> Iterator[ContextItem]:
    """One item's function-call equivalents (nothing for a listing or an approval)."""
    typed = BY_ITEM.get(type(item))
    if typed is not None:
        yield typed.lower(item)  # type: ignore[arg-type]
    elif type(item) in AGENT_TYPES:
        yield from multi_agent.lower(item)  # type: ignore[arg-type]
    elif isinstance(item, AdditionalTools):
        yield added_message(item)
    elif isinstance(item, McpCall):
        if item.approval_request_id is None:
            yield FunctionCall(call_id=item.id, name=item.name, arguments=item.arguments, namespace=item.server_label)
            yield FunctionCallOutput(call_id=item.id, output=call_output(item))
        else:
            yield FunctionCallOutput(call_id=item.approval_request_id, output=call_output(item))
    elif isinstance(item, McpApprovalRequest):
        yield FunctionCall(call_id=item.id, name=item.name, arguments=item.arguments, namespace=item.server_label)
    elif isinstance(item, McpApprovalResponse):
        if not item.approve:
            reason = f" Reason: {item.reason}" if item.reason else ""
            yield FunctionCallOutput(call_id=item.approval_request_id, output=REFUSED + reason)
    elif not isinstance(item, McpListTools):
        yield item


def call_output(item: McpCall) -> str:
    """What the model reads as the call's result: its output, or its error as text."""
    if item.output is not None:
        return item.output
    if item.error is not None:
        return error_text(item.error)
    return NOT_RUN  # cut off (incomplete) before the server ran it


def error_text(error: dict[str, Any]) -> str:
    """An MCP call's error (openai-python's McpToolCallError shapes) as one line the model can act on."""
    kind = error.get("type")
    if kind == "mcp_tool_execution_error":
        return f"Error: {_content_text(error.get('content'))}"
    code = error.get("code")
    head = f"{kind} {code}" if code is not None else str(kind)
    return f"Error ({head}): {error.get('message') or ''}".rstrip()


def _content_text(content: Any) -> str:
    """A tool's content: a string, or MCP content parts (text parts' text, others as JSON), one per line."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str) else json.dumps(part)
            for part in content
        )
    return json.dumps(content)
