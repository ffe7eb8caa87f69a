"""Admission: the one way a create becomes a turn, on every transport (HTTP, SSE, WebSocket, compact, input_tokens).

In a fixed order, each check refusing before anything later runs, so a refused create generates nothing and
stores nothing:

1. the drain: a server shutting down takes no new work (503 `server_is_overloaded`, drain.py);
2. the key's rate limit: requests per minute, and tokens per minute already spent (429, limits.py);
3. the store, when the response will be stored: a store seen down is probed first (503 `store_unavailable`,
   stores/health.py), so the create fails before it generates rather than at its save (not for a turn that is
   only measured, `TurnOptions.measure_only`: POST /v1/responses/input_tokens);
4. `start_turn`: validate, resolve, normalize, render and scan (pipeline/prepare.py).

A WebSocket connection is admitted once, at its upgrade (`admit_connection`: the drain, then a connection slot
of the process and of the key); its lane limits apply as each create joins a lane (lanes.py).

Whatever refuses a continuation, its parent is evicted from the requesting lane (§3.8.3, `Session.evict`).
"""

from __future__ import annotations

import time

from hotloop.errors import HotloopError
from hotloop.observability.tracing import ResponseTrace
from hotloop.pipeline.prepare import start_turn
from hotloop.pipeline.prepared import DEFAULT_OPTIONS, TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.turn import Turn
from hotloop.wire.request import CreateRequest


async def admit(
    service: Service,
    session: Session,
    request: CreateRequest,
    options: TurnOptions = DEFAULT_OPTIONS,
    received_at: float | None = None,
) -> Turn:
    """The checks above, then the prepared turn; raises `HotloopError` (or a fault of ours) having evicted a
    continuation's parent from the lane."""
    trace = _trace(service, options, received_at)
    try:
        start = time.perf_counter()
        service.drain.check()
        service.rate_limiter.admit(session.owner)
        if request.store is not False and not options.measure_only:  # a measured turn stores nothing
            await service.store.ensure_available()
        if trace is not None:
            trace.intervals.append(("admission", start, time.perf_counter()))
        return await start_turn(service, session, request, options, received_at, trace)
    except Exception as exc:
        session.evict(options.lane, request.previous_response_id)
        if trace is not None:  # a refused create's span says why
            code = exc.code if isinstance(exc, HotloopError) else type(exc).__name__
            trace.end(f"chat {request.model}", {"gen_ai.request.model": request.model}, error=code)
        raise


def _trace(service: Service, options: TurnOptions, received_at: float | None) -> ResponseTrace | None:
    if service.tracing is None or options.measure_only:  # a measured create is no response
        return None
    started = time.perf_counter() if received_at is None else received_at
    return service.tracing.response(options.trace_parent, options.trace_link, started)


def admit_connection(service: Service, owner: str) -> None:
    """A WebSocket upgrade: refused while draining (503), or beyond `max_connections` or
    `max_connections_per_key` (429); the slot is the caller's to `release_connection` when the socket closes."""
    service.drain.check()
    service.connection_slots.acquire(owner)


def release_connection(service: Service, owner: str) -> None:
    service.connection_slots.release(owner)
