"""The MCP client: hotloop runs remote MCP servers' tools inside a response (protocol.md §1.10) through `Clients`.
Streamable HTTP servers are spoken to by hotloop's own lean client (on net/http1.py's keep-alive pool, messages
decoded once with msgspec), legacy SSE ones by the official `mcp` SDK (the setting `mcp_client = "sdk"` gives
streamable HTTP servers the SDK's client too). A client library with Structs of its own: it imports nothing from the
pipeline, the wire, chat, the backends or the transports, and nothing of the SDK's pydantic models leaves it.

types.py (the vocabulary), clients.py (the pool: sessions by owner and endpoint, listing, calling, idle close),
base.py (the `Session` both clients' sessions are), streamable.py (the lean session), jsonrpc.py (MCP's JSON-RPC
messages as Structs), events.py (an event stream cut into messages), session.py (a session on the SDK, in its own
task), http.py (the SDK's HTTP client: the allowlist on redirects, per-call traces), failures.py (what went wrong,
as a `CallError`), convert.py (results into Structs, outputs capped)."""

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
