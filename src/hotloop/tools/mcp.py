"""The MCP items (protocol.md §1.10) as one kind: how they read to a model and what text they carry. The model
called an MCP tool as a function (`label.tool`), so its history reads back as one: an `mcp_call` is the call and
its output; an `mcp_approval_request` is the call (the model wrote it) and the answer comes later, a refusal as the
call's output, an approval as the `mcp_call` that ran it (its output only: the call is the request's). A tool
listing is not shown: its tools are in the system message. The item's id is the call id.

Declaring the servers, listing their tools and calling them is I/O, in pipeline/mcp/ and hotloop/mcp/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hotloop.wire.items import (
    FunctionCall,
    FunctionCallOutput,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
)

ITEMS = (McpListTools, McpCall, McpApprovalRequest, McpApprovalResponse)
McpItem = McpListTools | McpCall | McpApprovalRequest | McpApprovalResponse
REFUSED = "The user refused this call."
NOT_RUN = "The call did not complete."


def lower(item: McpItem) -> Iterator[FunctionCall | FunctionCallOutput]:
    """The item's function-call equivalents (nothing for a listing or an approval)."""
    if isinstance(item, McpCall):
        if item.approval_request_id is None:
            yield FunctionCall(call_id=item.id, name=item.name, arguments=item.arguments, namespace=item.server_label)
            yield FunctionCallOutput(call_id=item.id, output=call_output(item))
        else:
            yield FunctionCallOutput(call_id=item.approval_request_id, output=call_output(item))
    elif isinstance(item, McpApprovalRequest):
        yield FunctionCall(call_id=item.id, name=item.name, arguments=item.arguments, namespace=item.server_label)
    elif isinstance(item, McpApprovalResponse) and not item.approve:
        reason = f" Reason: {item.reason}" if item.reason else ""
        yield FunctionCallOutput(call_id=item.approval_request_id, output=REFUSED + reason)


def texts(item: McpItem) -> Iterator[str]:
    """Every piece of free text the item carries (the safety stage reads them): a call's arguments and its output,
    an approval's reason, the descriptions a server gave its tools."""
    if isinstance(item, McpCall | McpApprovalRequest):
        yield item.arguments
    if isinstance(item, McpApprovalResponse) and item.reason:
        yield item.reason
    yield from output_texts(item)


def output_texts(item: McpItem) -> Iterator[str]:
    """What came back from the server: a call's output or error, a listing's tool descriptions (the model reads
    them in its system message). A third party's text."""
    if isinstance(item, McpCall):
        if item.output:
            yield item.output
        if item.error is not None:
            yield from leaf_strings(item.error)
    elif isinstance(item, McpListTools):
        for tool in item.tools:
            if tool.description:
                yield tool.description


def leaf_strings(value: Any) -> Iterator[str]:
    """The string leaves of a JSON value (an error, an item of unknown shape), skipping the keys that carry no
    text (type, ids, status, sealed blobs) and data URLs (inline media is not text)."""
    if isinstance(value, str):
        if not value.startswith("data:"):
            yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key not in ("type", "id", "call_id", "status", "encrypted_content"):
                yield from leaf_strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from leaf_strings(inner)


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
