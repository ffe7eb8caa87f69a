"""MCP results converted once into hotloop's Structs: a listed tool, a call's output (capped) or its tool-execution
error. `listed_wire` and `outcome` read the wire's Structs (jsonrpc.py: what the lean client decodes, MCP's wire
names and parts as sent); `listed` and `tool_result` turn the SDK's pydantic models into the same first, so both
clients' results take one path. No I/O; nothing keeps a pydantic model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from hotloop.mcp.jsonrpc import Tool, ToolResult
from hotloop.mcp.types import CallError, CallResult, ListedTool

if TYPE_CHECKING:  # the SDK's models, read only where the SDK's client runs (session.py)
    import mcp_types


def listed_wire(wire: Tool) -> ListedTool:
    return ListedTool(
        name=wire.name, input_schema=wire.input_schema, description=wire.description, annotations=wire.annotations
    )


def outcome(result: ToolResult, max_bytes: int, seconds: float) -> CallResult:
    """`isError` results become `mcp_tool_execution_error` with the tool's content; the rest, the output text."""
    parts = result.content
    if result.is_error:
        return CallResult(
            error=CallError("mcp_tool_execution_error", content=capped_parts(parts, max_bytes)), seconds=seconds
        )
    text = joined(parts)
    if not parts and result.structured_content is not None:  # a tool may answer with structured content alone
        text = msgspec.json.encode(result.structured_content).decode()
    return CallResult(output=capped(text, max_bytes), seconds=seconds)


def listed(tool: mcp_types.Tool) -> ListedTool:
    """The SDK's listed tool."""
    annotations = tool.annotations
    return ListedTool(
        name=tool.name,
        input_schema=dict(tool.input_schema),
        description=tool.description,
        annotations=None if annotations is None else _plain(annotations),
    )


def tool_result(result: mcp_types.CallToolResult) -> ToolResult:
    """The SDK's call result as the wire had it: each part with its wire names and no unset field."""
    parts = [_plain(part) for part in result.content]
    return ToolResult(content=parts, is_error=result.is_error, structured_content=result.structured_content)


def call_result(result: mcp_types.CallToolResult, max_bytes: int, seconds: float) -> CallResult:
    return outcome(tool_result(result), max_bytes, seconds)


def joined(parts: list[dict[str, Any]]) -> str:
    """Text parts as they are, any other part (image, audio, resource, link) as its JSON, one per line."""
    return "\n".join(
        part["text"] if part.get("type") == "text" and isinstance(part.get("text"), str) else _json(part)
        for part in parts
    )


def _json(part: dict[str, Any]) -> str:
    """A part's JSON in one order whoever decoded it (the server's order, the SDK's models' order): `type`
    first, then every key sorted, nested ones too."""
    rest = msgspec.json.encode({key: value for key, value in part.items() if key != "type"}, order="sorted")
    if "type" not in part:
        return rest.decode()
    head = b'{"type":' + msgspec.json.encode(part["type"])
    return (head + (b"," + rest[1:] if len(rest) > 2 else b"}")).decode()


def capped(text: str, max_bytes: int) -> str:
    """`text` within `max_bytes` of UTF-8 (never splitting a character), with a marker giving the whole size."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    kept = data[:max_bytes].decode("utf-8", "ignore")  # "ignore" drops the one character cut in two, if any
    return f"{kept}\n[output truncated: {len(data)} bytes]"


def capped_parts(parts: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    """A failed tool's content as it is when it fits `max_bytes` as JSON, else its text capped, as one text part."""
    if len(msgspec.json.encode(parts)) <= max_bytes:
        return parts
    return [{"type": "text", "text": capped(joined(parts), max_bytes)}]


def _plain(model: Any) -> dict[str, Any]:
    # The wire's names (readOnlyHint, mimeType), no unset optional fields: what a client would have received.
    plain: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return plain
