"""Everything that can go wrong under a listing or a call, as one `Failure` carrying the `CallError` a caller sees
and what it means for the session (broken: drop it; stale: the server forgot it, open a new one and try again).
Both clients build theirs from these: the lean one from what it met (`http_status`, `unreachable`, `refused`,
`rpc_failure`), the SDK's from the exception it raised and the call's `Trace` (session.py `failure_of`).

An exception's text goes into a message only when it cannot hold a header value: httpx2's and http1's errors name
the host or URL at most, JSON-RPC errors are the server's own words."""

from __future__ import annotations

from hotloop.mcp.base import refusal
from hotloop.mcp.codes import CONNECTION_CLOSED, REQUEST_TIMEOUT
from hotloop.mcp.types import CallError

UNREACHABLE = 502  # http_error's code when no HTTP answer came: what a gateway answers for an unreachable upstream


class Failure(Exception):
    def __init__(self, error: CallError, *, broken: bool = False, stale: bool = False, refused: bool = False) -> None:
        super().__init__(error.message)
        self.error = error
        self.broken = broken or stale  # the session cannot serve another request
        self.stale = stale  # the server no longer knows the session: a new one may succeed at once
        self.refused = refused  # a redirect outside the allowlist


ENDED = CallError("mcp_protocol_error", code=CONNECTION_CLOSED, message="The MCP session was closed")


def http_status(status: int, detail: str | None, *, streamable: bool = True) -> Failure:
    """An HTTP error status. On streamable HTTP the session lives on, but a 404 says the server forgot it (MCP's
    transport: the client opens a new one); on legacy SSE the session is broken."""
    message = f"The MCP server answered HTTP {status}" + (f": {detail}" if detail else "")
    return Failure(
        CallError("http_error", code=status, message=message), broken=not streamable, stale=streamable and status == 404
    )


def unreachable(problem: str) -> Failure:
    """No HTTP answer at all (refused, reset, closed mid-answer): 502, as a gateway answers for its upstream."""
    message = f"The MCP server could not be reached: {problem}"
    return Failure(CallError("http_error", code=UNREACHABLE, message=message), broken=True)


def refused(status: int, target: str) -> Failure:
    """A redirect to `target` (shown without credentials) outside the allowlist: never followed."""
    return Failure(CallError("http_error", code=status, message=refusal(target)), broken=True, refused=True)


def rpc_failure(code: int, message: str) -> Failure:
    """A JSON-RPC error, the server's or one standing for it (the SDK's codes: CONNECTION_CLOSED when the answer's
    stream ended without it, which breaks the session)."""
    return Failure(CallError("mcp_protocol_error", code=code, message=message), broken=code == CONNECTION_CLOSED)


def timed_out(seconds: float, what: str = "no answer") -> Failure:
    message = f"Request timed out ({what} within {seconds:g} s)"
    return Failure(CallError("mcp_protocol_error", code=REQUEST_TIMEOUT, message=message))
