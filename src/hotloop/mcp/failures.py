"""Everything that can go wrong under a listing or a call, as one `Failure` carrying the `CallError` a caller sees
and what it means for the session (broken: drop it; stale: the server forgot it, open a new one and try again).
Both clients build theirs here: the lean one from what it met (`http_status`, `unreachable`, `refused`,
`rpc_failure`), the SDK's from the exception it raised and the call's `Trace` (`failure_of`).

An exception's text goes into a message only when it cannot hold a header value: httpx2's and http1's errors name
the host or URL at most, JSON-RPC errors are the server's own words."""

from __future__ import annotations

import asyncio

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT

from hotloop.mcp.base import refusal
from hotloop.mcp.http import Trace
from hotloop.mcp.types import CallError, NotAllowed

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


def failure_of(exc: BaseException | None, trace: Trace, *, streamable: bool) -> Failure:
    """The failure behind `exc` (raised by the SDK or its transport, perhaps in an ExceptionGroup; None when the
    SDK never answered), read with what the HTTP requests met: an HTTP status or an unanswered request says more
    than the JSON-RPC error the SDK made of it. `streamable`: a 404 then means the server dropped the session
    (MCP's streamable HTTP transport: the client must open a new one)."""
    leaf = None if exc is None else _leaf(exc)
    if isinstance(leaf, Failure):
        return leaf
    if trace.refused or isinstance(leaf, NotAllowed):
        message = trace.problem or str(leaf)
        return Failure(CallError("http_error", code=trace.status or 403, message=message), broken=True, refused=True)
    status = trace.status
    if status is None and isinstance(leaf, httpx2.HTTPStatusError):  # the SSE transport's GET: raise_for_status
        status = leaf.response.status_code
    if status is not None:
        return http_status(status, leaf.message if isinstance(leaf, MCPError) else None, streamable=streamable)
    if trace.problem is not None or isinstance(leaf, httpx2.TransportError):
        return unreachable(trace.problem or f"{type(leaf).__name__}: {leaf}")
    if isinstance(leaf, MCPError):
        return rpc_failure(leaf.code, leaf.message)
    if isinstance(leaf, TimeoutError):
        return Failure(CallError("mcp_protocol_error", code=REQUEST_TIMEOUT, message="Request timed out"))
    if leaf is None:
        return Failure(CallError("mcp_protocol_error", code=CONNECTION_CLOSED, message="No answer"), broken=True)
    # A result that is not valid MCP (a pydantic ValidationError), an unsupported protocol version, …: the session
    # itself may be fine (one that died is dropped anyway).
    message = f"{type(leaf).__name__}: {leaf}"
    return Failure(CallError("mcp_protocol_error", code=INTERNAL_ERROR, message=message))


def _leaf(exc: BaseException) -> BaseException:
    """The first exception in `exc` that is neither a group nor a cancellation: the SDK's task groups wrap what
    their tasks raised, beside the cancellations of the tasks that were stopped because of it."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [_leaf(inner) for inner in exc.exceptions]
    return next((leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)), leaves[0] if leaves else exc)
