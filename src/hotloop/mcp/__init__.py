"""The MCP client: hotloop runs remote MCP servers' tools inside a response (protocol.md §1.10) through `Clients`,
on the official `mcp` SDK. A client library with Structs of its own: it imports nothing from the pipeline, the
wire, chat or the transports, and nothing of the SDK's pydantic models leaves it.

types.py (the vocabulary), clients.py (the pool: sessions by owner and endpoint, listing, calling, idle close),
session.py (one session and its task), http.py (the HTTP client: the allowlist on redirects, per-call traces),
failures.py (what went wrong, as a `CallError`), convert.py (SDK results into Structs, outputs capped)."""

from hotloop.mcp.clients import Clients
from hotloop.mcp.types import (
    CallError,
    CallResult,
    Endpoint,
    ListedTool,
    ListFailed,
    NotAllowed,
    Stats,
    transport_for,
)

__all__ = [
    "CallError",
    "CallResult",
    "Clients",
    "Endpoint",
    "ListFailed",
    "ListedTool",
    "NotAllowed",
    "Stats",
    "transport_for",
]
