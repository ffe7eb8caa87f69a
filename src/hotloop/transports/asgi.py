"""What the HTTP, SSE and WebSocket endpoints share at the ASGI edge: an error as an HTTP response, the timing
opt-in header, a GET's `include`, and waiting for a client to go away."""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse, Response
from starlette.types import Receive

from hotloop.errors import HotloopError, RateLimited, ServerShuttingDown

TIMING_HEADER = "x-responsesapi-include-timing-metrics"


def error_response(exc: HotloopError) -> Response:
    """The HTTP error body (protocol.md §1.9): app.py's handlers, a door's refusal, a refused WebSocket upgrade."""
    headers = exc.headers if isinstance(exc, RateLimited | ServerShuttingDown) else None  # Retry-After, …
    return JSONResponse({"error": exc.payload()}, status_code=exc.status, headers=headers)


def wants_timings(headers: Headers) -> bool:
    """The opt-in for the `hotloop:timing_metrics` event, on a POST or a WebSocket upgrade."""
    return headers.get(TIMING_HEADER, "").strip().lower() in ("true", "1")


def included(query: QueryParams) -> list[str]:
    """A GET's `include` values (a response, a conversation's items): `include=a&include=b`, or openai-python's
    `include[]=a`."""
    return [*query.getlist("include"), *query.getlist("include[]")]


async def wait_disconnect(receive: Receive, ready: asyncio.Event | None = None) -> None:
    """Return once the client has gone (`http.disconnect`), setting `ready` if given; what else arrives is dropped.
    Run it as a task beside the response and cancel what it was watching when it returns (protocol.md §3.11)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if ready is not None:
        ready.set()
