"""Admission: the one way a create becomes a turn, on every transport (HTTP, SSE, WebSocket, compact).

In a fixed order, each check refusing before anything later runs, so a refused create generates nothing and
stores nothing:

1. the drain: a server shutting down takes no new work (503 `server_is_overloaded`, pipeline/admission/drain.py);
2. the key's rate limit: requests per minute, and tokens per minute already spent (429, pipeline/admission/limits.py);
3. the store, when the response will be stored: a store seen down is probed first (503 `store_unavailable`,
   stores/health.py), so the create fails before it generates rather than at its save;
4. `start_turn`: validate, resolve, normalize, render and scan (pipeline/prepare.py).

Connection and lane limits come before a create reaches here: they belong to the WebSocket connection that
queues it (pipeline/admission/lanes.py, pipeline/admission/limits.py's connection slots).

Whatever refuses a continuation, its parent is evicted from the requesting lane (§3.8.3, `Session.evict`).
"""

from __future__ import annotations

from hotloop.pipeline.prepare import start_turn
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.turn import DEFAULT_OPTIONS, Turn, TurnOptions
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
    try:
        service.drain.check()
        service.rate_limiter.admit(session.owner)
        if request.store is not False:
            await service.store.ensure_available()
        return await start_turn(service, session, request, options, received_at)
    except Exception:
        session.evict(options.lane, request.previous_response_id)
        raise
