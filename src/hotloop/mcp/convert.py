"""The SDK's pydantic results, converted once into hotloop's Structs: a listed tool, a call's output (capped) or its
tool-execution error. No I/O; nothing keeps a pydantic model."""

from __future__ import annotations

from typing import Any

import mcp_types
import msgspec

from hotloop.mcp.types import CallError, CallResult, ListedTool


def listed(tool: mcp_types.Tool) -> ListedTool:
    annotations = tool.annotations
    return ListedTool(
        name=tool.name,
        input_schema=dict(tool.input_schema),
        description=tool.description,
        annotations=None if annotations is None else _plain(annotations),
    )


def call_result(result: mcp_types.CallToolResult, max_bytes: int, seconds: float) -> CallResult:
    """`isError` results become `mcp_tool_execution_error` with the tool's content; the rest, the output text."""
    parts = [_plain(part) for part in result.content]
    if result.is_error:
        return CallResult(
            error=CallError("mcp_tool_execution_error", content=capped_parts(parts, max_bytes)), seconds=seconds
        )
    text = joined(parts)
    if not parts and result.structured_content is not None:  # a tool may answer with structured content alone
        text = msgspec.json.encode(result.structured_content).decode()
    return CallResult(output=capped(text, max_bytes), seconds=seconds)


def joined(parts: list[dict[str, Any]]) -> str:
    """Text parts as they are, any other part (image, audio, resource, link) as its JSON, one per line."""
    return "\n".join(
        part["text"]
        if part.get("type") == "text" and isinstance(part.get("text"), str)
        else msgspec.json.encode(part).decode()
        for part in parts
    )


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
