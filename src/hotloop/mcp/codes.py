"""The numbers MCP's wire carries: JSON-RPC's error codes, the two the `mcp` SDK adds, and the protocol versions a
client may agree on. Kept here rather than read from `mcp_types`, whose import builds the SDK's pydantic models
(~0.3 s of every server's start-up, ~0.85 s with the SDK's client): the lean client never needs them.
tests/test_mcp_codes.py checks each against the SDK the project pins."""

from __future__ import annotations

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
CONNECTION_CLOSED = -32000  # the SDK's: the answer's stream ended without it
REQUEST_TIMEOUT = -32001  # the SDK's: no answer in time

# The versions of the handshake, oldest first; a client proposes the latest and accepts any of them.
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
