"""WebSocket mode (protocol.md §3): a thin pump between frames and the same pipeline HTTP uses.

One reader loop decodes client events; each lane has a FIFO worker that runs one turn at a time and sends its
event bytes as they are. Closing the socket cancels generation and drops the connection's cache (§3.8.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from hotloop.errors import HotloopError, PreviousResponseNotFound, UpgradeRequired
from hotloop.pipeline.lanes import LaneLimits, LaneRouter, QueueFull
from hotloop.pipeline.service import Service
from hotloop.pipeline.session import Lane, Session, owner_of
from hotloop.pipeline.turn import start_turn
from hotloop.transports.auth import authenticate, selected_subprotocol
from hotloop.transports.http import error_response
from hotloop.wire import request as wire_request
from hotloop.wire.events import SteerFailed, encode_event, websocket_error
from hotloop.wire.request import CreateRequest

log = logging.getLogger("hotloop.websocket")
Job = Callable[[], Awaitable[None]]
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_INTERNAL = 1000, 1001, 1008, 1011


class Connection:
    def __init__(self, websocket: WebSocket, service: Service, session: Session) -> None:
        self.ws = websocket
        self.service = service
        self.session = session
        settings = service.settings
        self.router = LaneRouter(
            LaneLimits(
                max_age_s=settings.ws_max_age_s,
                max_named_lanes=settings.ws_max_named_lanes,
                max_queued=settings.ws_max_queued,
                lanes=settings.ws_lanes,
            )
        )
        self.active = asyncio.Semaphore(settings.ws_max_active)
        self.queues: dict[Lane, asyncio.Queue[Job]] = {}
        self.workers: dict[Lane, asyncio.Task[None]] = {}
        self.send_lock = asyncio.Lock()
        self.busy = 0
        self.limit_sent = False
        self.closed = asyncio.Event()

    # -- sending ---------------------------------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        async with self.send_lock:
            # ASGI carries text frames as str; Codex rejects binary frames (§3.2).
            await self.ws.send({"type": "websocket.send", "text": data.decode()})

    async def send_error(self, exc: HotloopError, stream_id: str | None = None) -> None:
        if exc.code == "websocket_connection_limit_reached":
            self.limit_sent = True
        await self.send(websocket_error(exc.status, exc.payload(), stream_id))

    # -- reading ---------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        timer = asyncio.create_task(self._age_timer())
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("text")
                if data is None:
                    data = message.get("bytes") or b""
                await self.on_frame(data)
        except WebSocketDisconnect:
            return
        finally:
            timer.cancel()
            await self.shutdown()

    async def on_frame(self, data: str | bytes) -> None:
        try:
            kind = wire_request.decode_event_type(data)
            if kind == "response.create":
                await self.on_create(wire_request.decode_create(data))
            elif kind == "response.append":
                self.on_append(wire_request.decode_append(data))
            elif kind == "response.steer":
                await self.on_steer(wire_request.decode_steer(data))
            elif kind == "response.processed":
                return  # Codex's acknowledgement (§3.6): no reply
            else:
                raise HotloopError(f"Unknown event type '{kind}'.", param="type", code="unknown_event_type")
        except QueueFull:
            await self.ws.close(CLOSE_POLICY, "too many queued response.create events")
        except HotloopError as exc:
            await self.send_error(exc)

    async def on_create(self, create: CreateRequest) -> None:
        stream_id = create.stream_id
        try:
            lane = self.router.admit(stream_id)
        except HotloopError as exc:
            valid = exc.code not in ("invalid_stream_id",)
            await self.send_error(exc, stream_id if valid else None)
            await self._maybe_close_expired()
            return
        self._enqueue(lane, lambda: self._run_turn(create, lane))

    def on_append(self, event: wire_request.AppendEvent) -> None:
        """Legacy `response.append`: continue the default lane's latest response (§3.6), resolved at its turn."""
        lane: Lane = None
        self.router.admit(None)

        async def job() -> None:
            latest = self.session.latest(lane)
            if latest is None:
                await self.send_error(PreviousResponseNotFound("(none)", param="input"))
                return
            create = _copy_request(latest.request, previous_response_id=latest.response.id, input=event.input)
            await self._run_turn(create, lane)

        self._enqueue(lane, job)

    async def on_steer(self, event: wire_request.SteerEvent) -> None:
        """Steering is not implemented: answer `response.steer.failed` (§3.6)."""
        target = event.previous_response_id
        steer = {"previous_response_id": target, "input": event.input}
        error = {
            "type": "invalid_request_error",
            "code": "steering_not_supported",
            "message": "Steering is not supported by this server.",
        }
        await self.send(encode_event(SteerFailed(sequence_number=0, steer=steer, error=error)).data)

    # -- lanes -----------------------------------------------------------------------------------------------------

    def _enqueue(self, lane: Lane, job: Job) -> None:
        key = self.router.queue_of(lane)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = asyncio.Queue()
            self.workers[key] = asyncio.create_task(self._worker(queue))
        self.busy += 1
        queue.put_nowait(job)

    async def _worker(self, queue: asyncio.Queue[Job]) -> None:
        while True:
            job = await queue.get()
            self.router.started()
            try:
                async with self.active:
                    await job()
            except (WebSocketDisconnect, RuntimeError) as exc:
                log.debug("send failed, connection closing: %s", exc)
            except Exception:
                log.exception("websocket job failed")
            finally:
                self.busy -= 1
            await self._maybe_close_expired()

    async def _run_turn(self, create: CreateRequest, lane: Lane) -> None:
        if self.router.expired():
            await self.send_error(self.router.connection_limit_error(), lane)
            return
        try:
            turn = await start_turn(self.service, self.session, create, websocket=True, lane=lane, stream_id=lane)
        except HotloopError as exc:
            await self.send_error(exc, lane)
            return
        async with contextlib.aclosing(turn.events()) as events:
            async for event in events:
                await self.send(event.data)

    # -- lifetime --------------------------------------------------------------------------------------------------

    async def _age_timer(self) -> None:
        await asyncio.sleep(self.router.limits.max_age_s)
        await self._maybe_close_expired()

    async def _maybe_close_expired(self) -> None:
        """Past the age limit with no work left: send the limit error once, then close 1001 (§3.11)."""
        if not self.router.expired() or self.busy or self.closed.is_set():
            return
        self.closed.set()
        if not self.limit_sent:
            self.limit_sent = True
            with contextlib.suppress(Exception):
                await self.send_error(self.router.connection_limit_error())
        with contextlib.suppress(Exception):
            await self.ws.close(CLOSE_GOING_AWAY)

    async def shutdown(self) -> None:
        for task in self.workers.values():
            task.cancel()
        if self.workers:
            await asyncio.gather(*self.workers.values(), return_exceptions=True)
        self.workers.clear()
        self.session.clear()


def _copy_request(request: CreateRequest, **changes: Any) -> CreateRequest:
    return msgspec.structs.replace(request, **changes)


async def websocket_endpoint(websocket: WebSocket) -> None:
    service: Service = websocket.app.state.service
    settings = service.settings
    try:
        key = authenticate(websocket.headers, settings.api_keys)
        if not settings.websocket:
            raise UpgradeRequired("WebSocket mode is disabled on this server; use HTTP.")
    except HotloopError as exc:
        await websocket.send_denial_response(error_response(exc))
        return
    await websocket.accept(subprotocol=selected_subprotocol(websocket.headers))
    session = service.session(owner_of(key, bool(settings.api_keys)), caching=True)
    await Connection(websocket, service, session).run()
