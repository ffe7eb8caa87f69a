"""MCP's JSON-RPC 2.0 messages as msgspec Structs (MCP's base protocol; its `initialize`, `tools/list` and
`tools/call`): what hotloop sends, encoded at once, and what a server answers, decoded once into the result its
request expects. Results keep MCP's wire names (inputSchema, isError, structuredContent) as fields' names; the
content parts and annotations stay the dicts the server sent. No I/O."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from hotloop.mcp.codes import HANDSHAKE_PROTOCOL_VERSIONS, INTERNAL_ERROR, LATEST_HANDSHAKE_VERSION, PARSE_ERROR

R = TypeVar("R")
Id = int | str

# The newest version MCP's `initialize` handshake negotiates (the SDK offers the same); a server may answer with
# any of SUPPORTED. The SDK's newer versions are reached by `server/discover`, not by this handshake.
PROTOCOL_VERSION = LATEST_HANDSHAKE_VERSION
SUPPORTED = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)


class RpcError(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class Incoming(msgspec.Struct, Generic[R]):
    """Any message a server sends: a response to a request (`id` with `result` or `error`), a request of its own
    (`id` and `method`: ping) or a notification (`method` alone: progress, logging). `params` is not read."""

    id: Id | None = None
    method: str | None = None
    result: R | None = None
    error: RpcError | None = None


class Initialized(msgspec.Struct):
    """The result of `initialize`: the version the server chose (its capabilities and info are not read)."""

    protocol_version: str = msgspec.field(name="protocolVersion")


class Tool(msgspec.Struct):
    name: str
    input_schema: dict[str, Any] = msgspec.field(name="inputSchema")
    description: str | None = None
    annotations: dict[str, Any] | None = None


class ToolsPage(msgspec.Struct):
    tools: list[Tool]
    next_cursor: str | None = msgspec.field(default=None, name="nextCursor")


class ToolResult(msgspec.Struct):
    """A `tools/call` result: the content parts as sent (text, image, audio, resource, link)."""

    content: list[dict[str, Any]] = msgspec.field(default_factory=list)
    is_error: bool | None = msgspec.field(default=None, name="isError")
    structured_content: Any = msgspec.field(default=None, name="structuredContent")


class _Outgoing(msgspec.Struct, omit_defaults=True):
    """A request (id and method), a notification (method) or a reply to a server's request (id and result or
    error): UNSET fields are left out of the JSON."""

    jsonrpc: str
    id: Id | msgspec.UnsetType = msgspec.UNSET
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    result: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    error: RpcError | msgspec.UnsetType = msgspec.UNSET


_encode = msgspec.json.Encoder().encode
INITIALIZED = _encode(_Outgoing("2.0", method="notifications/initialized"))


def request(id: Id, method: str, params: dict[str, Any] | None = None) -> bytes:
    return _encode(_Outgoing("2.0", id=id, method=method, params=msgspec.UNSET if params is None else params))


def notification(method: str, params: dict[str, Any]) -> bytes:
    return _encode(_Outgoing("2.0", method=method, params=params))


def reply(id: Id, result: dict[str, Any] | None = None, error: RpcError | None = None) -> bytes:
    if error is not None:
        return _encode(_Outgoing("2.0", id=id, error=error))
    return _encode(_Outgoing("2.0", id=id, result=result or {}))


class Decoders:
    """The decoder of a method's messages, built once per result type."""

    initialize = msgspec.json.Decoder(Incoming[Initialized])
    tools_list = msgspec.json.Decoder(Incoming[ToolsPage])
    tools_call = msgspec.json.Decoder(Incoming[ToolResult])
    any = msgspec.json.Decoder(Incoming[dict[str, Any]])  # an error body: only `error` is read


def undecodable(exc: msgspec.MsgspecError) -> RpcError:
    """What a message that could not be decoded is, as the SDK reports it: not JSON at all (PARSE_ERROR), or JSON
    that is not the result its request expects (INTERNAL_ERROR, as the SDK's validation error)."""
    if isinstance(exc, msgspec.ValidationError):
        return RpcError(INTERNAL_ERROR, f"ValidationError: {exc}")
    return RpcError(PARSE_ERROR, f"Failed to parse the MCP server's message: {exc}")
