"""Server-sent events (protocol.md §2.1): the same event bytes, framed as `event:`/`data:`, then `[DONE]`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from starlette.responses import StreamingResponse

from hotloop.wire.events import Event

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def frames(events: AsyncGenerator[Event, None], done: bool) -> AsyncGenerator[bytes, None]:
    # Closing the events when the client goes away (the send fails here) cancels generation at once,
    # rather than whenever the abandoned generator is collected.
    async with contextlib.aclosing(events):
        async for event in events:
            yield event.sse()
    if done:
        yield DONE


def sse_response(events: AsyncGenerator[Event, None], *, done: bool) -> StreamingResponse:
    return StreamingResponse(frames(events, done), media_type="text/event-stream", headers=HEADERS)
