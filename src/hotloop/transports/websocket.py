"""WebSocket mode (protocol.md §3): a thin pump between frames and the same pipeline HTTP uses.

Every decision is the connection's protocol's (pipeline/connection/protocol.py): this module feeds it what happened
and performs the actions it returns. One reader loop hands it the client's frames; each lane has a FIFO worker
that runs its work one item at a time, admitting each `Run` and sending its turn's event bytes as they are; a timer
wakes it at the age limit or a drain. Closing the socket cancels generation and drops the connection's cache
(§3.8.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from hotloop.errors import HotloopError, ServerError, UpgradeRequired
from hotloop.pipeline.admission.entry import admit, admit_connection, release_connection
from hotloop.pipeline.admission.lanes import LaneLimits
from hotloop.pipeline.connection.actions import Action, Close, Enqueue, Run, Send, Work
from hotloop.pipeline.connection.protocol import ConnectionProtocol
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Lane, Session, owner_of
from hotloop.transports.asgi import error_response, wants_timings
from hotloop.transports.auth import authenticate, selected_subprotocol
from hotloop.transports.ws_writer import FrameWriter

log = logging.getLogger("hotloop.websocket")
SERVER_ERROR = "The server had an error while processing your request."


class Connection:
    """One accepted WebSocket: its protocol (every decision), its lane workers and its frame writer."""

    def __init__(
        self,
        websocket: WebSocket,
        service: Service,
        session: Session,
        default_model: str | None = None,
        trace: tuple[Any, Any] = (None, None),
    ) -> None:
        self.ws = websocket
        self.service = service
        self.session = session
        settings = service.settings
        limits = LaneLimits(
            max_age_s=settings.ws_max_age_s,
            max_named_lanes=settings.ws_max_named_lanes,
            max_queued=settings.ws_max_queued,
            lanes=settings.ws_lanes,
        )
        self.protocol = ConnectionProtocol(
            session,
            limits,
            service.drain,
            default_model=default_model,
            timings=wants_timings(websocket.headers),
            trace=trace,
        )
        self.active = asyncio.Semaphore(settings.ws_max_active)  # responses generating at once (§3.5)
        self.queues: dict[Lane, asyncio.Queue[Work]] = {}
        self.workers: dict[Lane, asyncio.Task[None]] = {}
        self.writer = FrameWriter(websocket, settings.stream_flush_ms / 1000)

    async def perform(self, actions: list[Action]) -> Run | None:
        """Do what the protocol decided, in order; a `Run` is handed back for the lane's worker to run."""
        run = None
        for action in actions:
            match action:
                case Send(data=data):
                    await self.writer.send(data)  # bytes as they are, coalesced per loop iteration
                case Enqueue(queue=queue, work=work):
                    self._enqueue(queue, work)
                case Close(code=code, reason=reason):
                    with contextlib.suppress(Exception):
                        await self.writer.close(code, reason)
                case Run():
                    run = action
        return run

    async def _settle(self, actions: list[Action]) -> None:
        """Perform a close decision, each action on its own: the connection may be gone already."""
        for action in actions:
            with contextlib.suppress(Exception):
                await self.perform([action])

    # -- reading ---------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Read frames until the client goes or the protocol closes; then stop every lane and drop the cache."""
        timer = asyncio.create_task(self._age_timer())
        self.service.drain.connections.add(self)
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("text")
                if data is None:
                    data = message.get("bytes") or b""
                await self.perform(self.protocol.receive_frame(data))
                if self.protocol.closed:
                    return  # the server closed (1008): read nothing more, stop the work in flight
        except WebSocketDisconnect:
            return
        finally:
            timer.cancel()
            self.service.drain.connections.discard(self)
            await self.shutdown()

    # -- lanes -----------------------------------------------------------------------------------------------------

    def _enqueue(self, key: Lane, work: Work) -> None:
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = asyncio.Queue()
            self.workers[key] = asyncio.create_task(self._worker(queue))
        queue.put_nowait(work)

    async def _worker(self, queue: asyncio.Queue[Work]) -> None:
        while True:
            work = await queue.get()
            self.protocol.dequeued()
            try:
                async with self.active:
                    run = await self.perform(self.protocol.at_head(work))
                    while run is not None:  # a response, then the successors its steers start (§3.6)
                        run = await self.perform(await self._turn(run))
            except (WebSocketDisconnect, RuntimeError, OSError) as exc:  # uvicorn's ClientDisconnected is an OSError
                log.debug("send failed, connection closing: %s", exc)
            except Exception:
                log.exception("websocket job failed")
            finally:
                done = self.protocol.job_done()
            await self._settle(done)

    async def _turn(self, run: Run) -> list[Action]:
        """Admit `run` at the head of its lane, like every other check (§3.9), and send its events; returns what the
        protocol says follows (late steer replies, a successor's `Run`)."""
        try:
            turn = await admit(self.service, self.session, run.create, run.options)
        except HotloopError as exc:
            return self.protocol.refused(run, exc)
        except Exception:  # a fault of ours (storage, …): still answer the create, never leave it hanging
            log.exception("could not start a response")
            return self.protocol.refused(run, ServerError(SERVER_ERROR))
        stream = self.protocol.started(run, turn)
        writer = self.writer
        send = writer.send
        congested = (lambda: writer.congested) if writer.direct else None
        try:
            async with contextlib.aclosing(turn.events(congested)) as events:
                async for event in events:  # per event: the send and one count, nothing more
                    await send(event.data, event.delta)
                    stream.sent += 1
        except BaseException:
            self.protocol.abandoned(stream)
            raise
        return self.protocol.ended(stream)

    # -- lifetime --------------------------------------------------------------------------------------------------

    async def _age_timer(self) -> None:
        """Wake at the age limit or when the server starts draining, whichever comes first (§3.11)."""
        started = self.service.drain.started
        # Loop timers may fire a little early against time.monotonic(): wait until the limit has really passed.
        while self.protocol.remaining() > 0 and not started.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(started.wait(), max(self.protocol.remaining(), 0.001))
        await self._settle(self.protocol.timer())

    async def going_away(self) -> None:
        """The end of a shutdown (pipeline/state/drain.py's `Closable`): close 1001 now, whatever is left."""
        await self._settle(self.protocol.going_away())

    async def shutdown(self) -> None:
        for task in self.workers.values():
            task.cancel()
        if self.workers:
            await asyncio.gather(*self.workers.values(), return_exceptions=True)
        self.workers.clear()
        self.service.end_session(self.session)


async def websocket_endpoint(websocket: WebSocket) -> None:
    service: Service = websocket.app.state.service
    settings = service.settings
    try:
        key = authenticate(websocket.headers, settings.api_keys)
        if not settings.websocket:
            raise UpgradeRequired("WebSocket mode is disabled on this server; use HTTP.")
        owner = owner_of(key, bool(settings.api_keys))
        admit_connection(service, owner)
    except HotloopError as exc:
        await websocket.send_denial_response(error_response(exc))
        return
    gauge = service.metrics.connections.labels("websocket")
    gauge.inc()
    span = None
    trace: tuple[Any, Any] = (None, None)
    if service.tracing is not None:  # the connection's span; each response's links to it (docs/tracing.md)
        parent = service.tracing.parent(websocket.headers)
        span = service.tracing.connection(parent, time.perf_counter())
        trace = (parent, span.get_span_context())
    try:
        await websocket.accept(subprotocol=selected_subprotocol(websocket.headers))
        session = service.session(owner, caching=True)
        default_model = websocket.query_params.get("model") or None  # other query parameters are ignored (§3.1)
        await Connection(websocket, service, session, default_model, trace).run()
    finally:
        gauge.dec()
        release_connection(service, owner)
        if span is not None:
            span.end()
