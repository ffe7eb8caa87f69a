"""Server-sent events (protocol.md §2.1): the same event bytes, framed as `event:`/`data:`, then `[DONE]`.

Every event ready in one iteration of the event loop leaves in one body chunk, one socket write (issue 11): the
events are read by a producer task into a buffer that the response drains whole each time it runs. While a chunk
waits for the transport (the client reads slower than the model writes), `SendState.congested` is true and the
turn merges its deltas (pipeline/merge.py). A delta event may wait a few milliseconds more for the deltas after it,
to share their write (pacing.py); any other event is written at once, with the deltas before it. A client that goes
away cancels the producer, and so generation, at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hotloop.transports.asgi import wait_disconnect
from hotloop.transports.pacing import FlushWindow
from hotloop.wire.events import Event

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class SendState:
    """Whether the response is waiting for the transport to take a chunk (the turn's `congested`)."""

    __slots__ = ("chunks", "sending")

    def __init__(self) -> None:
        self.sending = False
        self.chunks = 0  # body chunks written (tests read it: fewer than events when coalesced)

    def congested(self) -> bool:
        return self.sending


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[Event, None],
        *,
        done: bool,
        state: SendState | None = None,
        flush_window_s: float = 0.0,
    ) -> None:
        self.events = events
        self.done = done
        self.state = state or SendState()
        self._window = FlushWindow(flush_window_s)
        self._timer: asyncio.TimerHandle | None = None  # wakes the writer at the window's end for waiting deltas
        self._queued_delta = False
        self.status_code = 200
        self.background = None
        self.init_headers(HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        buffer: list[bytes] = []
        ready = asyncio.Event()  # set by the producer (events buffered, or its end) and by a disconnect
        producer = asyncio.ensure_future(self._produce(buffer, ready))
        listener = asyncio.ensure_future(wait_disconnect(receive, ready))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            while True:
                await ready.wait()
                ready.clear()
                if listener.done():
                    return  # the client went away: the producer is cancelled below
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if buffer:
                    await self._write(send, b"".join(buffer) if len(buffer) > 1 else buffer[0], buffer)
                if producer.done() and not buffer:
                    break
            producer.result()  # a failure of the stream itself propagates, as it would from StreamingResponse
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self._timer is not None:
                self._timer.cancel()
            for task in (producer, listener):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await producer
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def _write(self, send: Send, chunk: bytes, buffer: list[bytes]) -> None:
        buffer.clear()
        deltas, self._queued_delta = self._queued_delta, False
        self.state.sending = True
        try:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            self.state.sending = False
        self.state.chunks += 1
        if deltas:
            self._window.wrote(asyncio.get_running_loop().time())

    async def _produce(self, buffer: list[bytes], ready: asyncio.Event) -> None:
        # Closing the events when the client goes away (this task is cancelled) cancels generation at once,
        # rather than whenever the abandoned generator is collected.
        loop = asyncio.get_running_loop()
        try:
            async with contextlib.aclosing(self.events) as events:
                async for event in events:
                    buffer.append(event.sse())
                    if event.delta:
                        self._queued_delta = True
                        if self._timer is not None or ready.is_set():
                            continue  # it leaves with what is already waiting
                        wait = self._window.delay(loop.time())
                        if wait > 0:
                            self._timer = loop.call_later(wait, ready.set)
                            continue
                    ready.set()
            if self.done:
                buffer.append(DONE)
        finally:
            ready.set()


def sse_response(
    events: AsyncGenerator[Event, None], *, done: bool, state: SendState | None = None, flush_window_s: float = 0.0
) -> EventStreamResponse:
    return EventStreamResponse(events, done=done, state=state, flush_window_s=flush_window_s)
