"""The MCP client's vocabulary: an endpoint, a listed tool, a call's result or error, the two exceptions and the
figures for metrics. Plain msgspec Structs and dicts: nothing of the SDK's pydantic models leaves `hotloop.mcp`."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

Transport = Literal["streamable_http", "sse"]
ErrorType = Literal["mcp_protocol_error", "mcp_tool_execution_error", "http_error"]


def transport_for(url: str) -> Transport:
    """The transport a URL names by convention: legacy SSE when its path ends with `/sse`, else streamable HTTP."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable_http"


class Endpoint(msgspec.Struct, frozen=True):
    """One MCP server as one caller reaches it. `headers` are already merged (configured headers, the request's
    headers, `authorization` as ("Authorization", "Bearer <token>")); they are part of the session's key and are
    sent on every request, never logged."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    transport: Transport = "streamable_http"

    def __repr__(self) -> str:  # header values are secrets: a repr in a log line or a traceback shows names only
        names = [name for name, _ in self.headers]
        return f"Endpoint(url={self.url!r}, headers={names!r}, transport={self.transport!r})"


class ListedTool(msgspec.Struct, frozen=True):
    """A tool as `tools/list` describes it; `annotations` is MCP's ToolAnnotations as a dict (readOnlyHint, …)."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class CallError(msgspec.Struct, frozen=True):
    """openai-python's McpToolCallError, one of three: `mcp_protocol_error` (code: the JSON-RPC code; a timeout is
    -32001 "Request timed out"), `mcp_tool_execution_error` (content: the tool's content parts, as dicts) or
    `http_error` (code: the HTTP status; 502 when no HTTP answer came at all: unreachable, connection lost)."""

    type: ErrorType
    code: int | None = None
    message: str | None = None
    content: Any = None


class CallResult(msgspec.Struct, frozen=True):
    """A tool call's outcome: `output` (text parts joined, other parts as JSON, at most `max_output_bytes` of UTF-8
    then "\\n[output truncated: N bytes]", N the whole output's size) or `error`; `seconds`: the call's own time."""

    output: str | None = None
    error: CallError | None = None
    seconds: float = 0.0


class ListFailed(Exception):
    """The server's tools could not be listed; `str(exc)` says why (connection refused, HTTP 401, a protocol
    error, a timeout). Never carries header values."""


class NotAllowed(Exception):
    """A URL, or a redirect's target, outside the operator's allowlist; nothing was sent to it."""


class Stats(msgspec.Struct):
    """Running figures for metrics, written by `Clients` only: tool calls, their failures by `CallError.type`, the
    seconds they took, listings and failed listings, sessions opened."""

    calls: int = 0
    failures: dict[str, int] = msgspec.field(default_factory=dict)
    call_seconds: float = 0.0
    lists: int = 0
    list_failures: int = 0
    sessions: int = 0
