"""The HTTP client under an MCP session: httpx2 (what the SDK's transports speak) with the operator's allowlist
applied to every redirect, and what each request met recorded in the `Trace` of the call that sent it.

Why a trace: the SDK turns an HTTP error status into a generic JSON-RPC error (the status is lost), and its legacy
SSE transport drops a POST that failed without ever answering the request. The SDK starts each request's HTTP
exchange in a task that runs in the sender's context (`mcp.shared._context_streams`), so the request sees the
contextvar the caller set; the session's own requests (initialize, the GET stream) see the session's trace.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable

import httpx2

from hotloop.mcp.base import refusal
from hotloop.mcp.types import NotAllowed

SSE_READ_S = 300.0  # the longest silence on an open event stream (the SDK's default): SSE servers ping sooner
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("hotloop_mcp_trace", default=None)


class Trace:
    """What the HTTP requests sent for one call (or one session's opening) met: the last error status, a refused
    redirect, a request that got no HTTP answer. `failed` is set on any of them."""

    __slots__ = ("failed", "problem", "refused", "status")

    def __init__(self) -> None:
        self.status: int | None = None  # the last status >= 400, or a refused redirect's status
        self.problem: str | None = None  # what went wrong, for a message: no header values in it
        self.refused = False
        self.failed = asyncio.Event()

    def answered(self, status: int) -> None:
        self.status = status
        self.failed.set()

    def unanswered(self, exc: BaseException) -> None:
        self.problem = f"{type(exc).__name__}: {exc}".rstrip(": ")
        self.failed.set()

    def refuse(self, status: int, target: str) -> None:
        self.status = status
        self.refused = True
        self.problem = refusal(target)
        self.failed.set()


def tracing(trace: Trace) -> None:
    """Make `trace` the one the requests sent from this context (and the tasks it starts) record into."""
    _current.set(trace)


class Guarded(httpx2.AsyncBaseTransport):
    """The network transport, watched: every response's status and every failure go to the sender's trace, and a
    redirect whose target `allowed` refuses is never followed (NotAllowed is raised on the redirect response,
    before the client builds the next request). The SDK itself follows only same-origin redirects; this also
    keeps a same-origin hop to a path outside an allowed prefix from being made."""

    def __init__(self, allowed: Callable[[str], bool], inner: httpx2.AsyncBaseTransport) -> None:
        self._allowed = allowed
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        trace = _current.get()
        try:
            response = await self._inner.handle_async_request(request)
        except Exception as exc:
            if trace is not None:
                trace.unanswered(exc)
            raise
        status = response.status_code
        if status in REDIRECT_STATUSES and "location" in response.headers:
            target = request.url.join(response.headers["location"])
            if not self._allowed(str(target)):
                await response.aclose()
                shown = str(target.copy_with(userinfo=b"", query=None, fragment=None))
                if trace is not None:
                    trace.refuse(status, shown)
                raise NotAllowed(f"redirect to {shown} refused: not an allowed MCP server URL")
        elif status >= 400 and trace is not None:
            trace.answered(status)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def guarded_client(
    allowed: Callable[[str], bool], headers: list[tuple[str, str]], connect_s: float
) -> httpx2.AsyncClient:
    """One session's HTTP client: its endpoint's headers on every request, no proxy or netrc credentials from the
    environment, redirects left to the SDK (which follows same-origin ones) under `Guarded`."""
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(connect_s, read=SSE_READ_S),
        transport=Guarded(allowed, httpx2.AsyncHTTPTransport()),
        trust_env=False,
    )
