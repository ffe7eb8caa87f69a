"""WebSocket mode (protocol.md §3): a thin pump between frames and the same pipeline HTTP uses.

One reader loop decodes client events; each lane has a FIFO worker that runs one turn at a time and sends its
event bytes as they are. Closing the socket cancels generation and drops the connection's cache (§3.8.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from hotloop.errors import HotloopError, PreviousResponseNotFound, RateLimited, ServerError, UpgradeRequired
from hotloop.pipeline.admission.entry import admit, admit_connection, release_connection
from hotloop.pipeline.admission.lanes import ConnectionState, LaneLimits, QueueFull
from hotloop.pipeline.prepared import TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Lane, Session, owner_of
from hotloop.pipeline.steering import (
    WAITING,
    Steer,
    Steering,
    SteerRefused,
    new_steer,
    successor,
    with_steers,
)
from hotloop.pipeline.turn import Turn
from hotloop.transports.asgi import error_response, wants_timings
from hotloop.transports.auth import authenticate, selected_subprotocol
from hotloop.transports.ws_writer import FrameWriter
from hotloop.wire.events import SteerAccepted, SteerFailed, SteerPending, encode_event, websocket_error
from hotloop.wire.request import (
    AppendEvent,
    CreateEvent,
    CreateRequest,
    InvalidCreate,
    ProcessedEvent,
    SteerEvent,
    decode_client_event,
)

log = logging.getLogger("hotloop.websocket")
SteerReply = SteerAccepted | SteerPending | SteerFailed
Job = Callable[[], Awaitable[None]]
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_INTERNAL = 1000, 1001, 1008, 1011


class Connection:
    def __init__(
        self, websocket: WebSocket, service: Service, session: Session, default_model: str | None = None
    ) -> None:
        self.ws = websocket
        self.timings = wants_timings(websocket.headers)
        self.default_model = default_model  # `?model=` on the upgrade URL (§3.1)
        self.service = service
        self.session = session
        settings = service.settings
        limits = LaneLimits(
            max_age_s=settings.ws_max_age_s,
            max_named_lanes=settings.ws_max_named_lanes,
            max_queued=settings.ws_max_queued,
            lanes=settings.ws_lanes,
        )
        self.state = ConnectionState(limits)  # every protocol decision (pipeline/admission/lanes.py); here only the I/O
        self.router = self.state.router
        self.active = asyncio.Semaphore(settings.ws_max_active)
        self.queues: dict[Lane, asyncio.Queue[Job]] = {}
        self.workers: dict[Lane, asyncio.Task[None]] = {}
        self.writer = FrameWriter(websocket)
        self.closed = asyncio.Event()
        self.running: dict[str, Turn] = {}  # responses generating now, by id (a steer may name one)
        self.steering = Steering()

    # -- sending ---------------------------------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        await self.writer.send(data)  # the event's bytes as they are, coalesced per loop iteration

    async def send_error(self, exc: HotloopError, stream_id: str | None = None) -> None:
        self.state.error_sent(exc.code)
        payload: dict[str, Any] = exc.payload()
        if isinstance(exc, RateLimited):
            payload["headers"] = exc.headers  # retry-after and x-ratelimit-*, as over HTTP (§3.10)
        await self.send(websocket_error(exc.status, payload, stream_id))

    # -- reading ---------------------------------------------------------------------------------------------------

    async def run(self) -> None:
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
                await self.on_frame(data)
                if self.closed.is_set():
                    return  # the server closed (1008): read nothing more, stop the work in flight
        except WebSocketDisconnect:
            return
        finally:
            timer.cancel()
            self.service.drain.connections.discard(self)
            await self.shutdown()

    async def on_frame(self, data: str | bytes) -> None:
        try:
            match decode_client_event(data):  # decoded once, into its event (wire/request.py)
                case CreateEvent() as create:
                    await self.on_create(create)
                case AppendEvent() as append:
                    self.on_append(append)
                case SteerEvent() as steer:
                    await self.on_steer(steer)
                case ProcessedEvent():
                    return  # Codex's acknowledgement (§3.6): no reply
        except InvalidCreate as invalid:
            await self.on_invalid_create(invalid.error, data)
        except QueueFull:
            self.closed.set()
            await self.writer.close(CLOSE_POLICY, "too many queued response.create events")
        except HotloopError as exc:
            await self.send_error(exc)

    async def on_create(self, create: CreateRequest) -> None:
        if create.model is None and self.default_model:
            create = _copy_request(create, model=self.default_model)
        lane = await self._admit(create.stream_id)
        if lane is not False:
            self._enqueue(lane, lambda: self._run_turn(create, lane))

    async def on_invalid_create(self, exc: HotloopError, data: str | bytes) -> None:
        """A create whose fields fail to decode is still a create on its lane (§3.9): the error waits for the lane,
        echoes its `stream_id` and evicts its `previous_response_id` (§3.8.3); nothing else of it is used."""
        routing = _routing_of(data)
        if not isinstance(routing.stream_id, str | None):
            await self.send_error(exc)  # no usable lane: a connection-level error
            return
        lane = await self._admit(routing.stream_id)
        if lane is False:
            return
        parent = routing.previous_response_id if isinstance(routing.previous_response_id, str) else None

        async def job() -> None:
            if self.router.expired():
                await self.send_error(self.router.connection_limit_error(), lane)
                return
            self.session.evict(lane, parent)
            await self.send_error(exc, lane)

        self._enqueue(lane, job)

    async def _admit(self, stream_id: str | None) -> Lane | Literal[False]:
        """The lane a create joins, or False after answering a connection-level error (§3.5, §3.11)."""
        try:
            return self.router.admit(stream_id)
        except HotloopError as exc:
            valid = exc.code not in ("invalid_stream_id",)
            await self.send_error(exc, stream_id if valid else None)
            await self._maybe_close_expired()
            return False

    def on_append(self, event: AppendEvent) -> None:
        """Legacy `response.append`: continue the default lane's latest response (§3.6), resolved at its turn."""
        lane: Lane = None
        self.router.admit(None)

        async def job() -> None:
            latest = self.session.latest(lane)
            if latest is None:
                await self.send_error(PreviousResponseNotFound("(none)", param="input"))
                return
            # Every field comes from the latest request except `generate`: an append after a warmup generates.
            create = _copy_request(
                latest.request, previous_response_id=latest.response.id, input=event.input, generate=None
            )
            await self._run_turn(create, lane)

        self._enqueue(lane, job)

    async def on_steer(self, event: SteerEvent) -> None:
        """A steer (pipeline/steering.py, §3.6): into the response generating now, queued for a response that waits
        for tool outputs, or refused. A reply outside the target's stream takes its lane and next number."""
        target = event.previous_response_id
        try:
            steer = new_steer(target, event.input)
            turn = self.running.get(steer.target)
            if turn is None:
                await self._pending(steer, self.steering.answer(steer))
                return
            turn.steer(steer)  # acknowledged in its stream, or once it has ended
        except SteerRefused as refused:
            steer_ref = {"previous_response_id": target, "input": event.input}
            await self._steer_failed(target, steer_ref, refused.code, refused.message)

    async def _pending(self, steer: Steer, waiting: list[dict[str, Any]]) -> None:
        fields = {"steer": steer.ref(), "reason": WAITING, "required_input": waiting}
        await self._steer_reply(SteerPending, steer.target, **fields)

    async def _steer_failed(self, target: str | None, steer: dict[str, Any], code: str, message: str) -> None:
        error = {"type": "invalid_request_error", "code": code, "message": message}
        await self._steer_reply(SteerFailed, target, steer=steer, error=error)

    async def _steer_reply(self, kind: type[SteerReply], target: str | None, **fields: Any) -> None:
        """A steer reply outside the target's stream: its lane and its next number (then the one after)."""
        lane, seq = self.state.steer_target(target)
        self.state.replied(target)
        await self.send(encode_event(kind(sequence_number=seq, stream_id=lane, **fields)).data)

    # -- lanes -----------------------------------------------------------------------------------------------------

    def _enqueue(self, lane: Lane, job: Job) -> None:
        key = self.router.queue_of(lane)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = asyncio.Queue()
            self.workers[key] = asyncio.create_task(self._worker(queue))
        self.state.queued()
        queue.put_nowait(job)

    async def _worker(self, queue: asyncio.Queue[Job]) -> None:
        while True:
            job = await queue.get()
            self.router.started()
            try:
                async with self.active:
                    await job()
            except (WebSocketDisconnect, RuntimeError, OSError) as exc:  # uvicorn's ClientDisconnected is an OSError
                log.debug("send failed, connection closing: %s", exc)
            except Exception:
                log.exception("websocket job failed")
            finally:
                self.state.done()
            await self._maybe_close_expired()

    async def _run_turn(self, create: CreateRequest, lane: Lane) -> None:
        """A create, then the successors its steers start (§3.6), one after the other on its lane."""
        steers: list[Steer] = []
        next_create: CreateRequest | None = create
        while next_create is not None:
            next_create, steers = await self._turn(next_create, lane, steers)

    async def _turn(
        self, create: CreateRequest, lane: Lane, steers: list[Steer]
    ) -> tuple[CreateRequest | None, list[Steer]]:
        """One response; `steers`: those it is the successor of. Returns the successor to run next, if steered."""
        if self.router.expired():
            await self.send_error(self.router.connection_limit_error(), lane)
            return None, []
        if not steers:
            create = with_steers(create, self.steering.continued(create.previous_response_id))
        options = TurnOptions(
            websocket=True, lane=lane, stream_id=lane, transport="websocket", include_timings=self.timings
        )
        try:
            # At the head of its lane, like every other check (§3.9): a create refused here runs nothing.
            turn = await admit(self.service, self.session, create, options)
        except HotloopError as exc:
            await self._refused(exc, lane, steers)
            return None, []
        except Exception:  # a fault of ours (storage, …): still answer the create, never leave it hanging
            log.exception("could not start a response")
            await self._refused(ServerError("The server had an error while processing your request."), lane, steers)
            return None, []
        response_id = turn.response.id
        sent = 0
        writer = self.writer
        congested = (lambda: writer.congested) if writer.direct else None
        self.running[response_id] = turn
        try:
            async with contextlib.aclosing(turn.events(congested)) as events:
                async for event in events:
                    await self.send(event.data)
                    sent += 1
                    self.state.sent(response_id, lane, sent)
        finally:
            self.running.pop(response_id, None)
        self.state.finished(response_id)
        return await self._after_steers(turn, create)

    async def _refused(self, exc: HotloopError, lane: Lane, steers: list[Steer]) -> None:
        """A create refused before it started; a successor's refusal is its steers' failure."""
        if not steers:
            await self.send_error(exc, lane)
            return
        for steer in steers:
            ref = steer.failed_ref()
            await self._steer_failed(steer.target, ref, "successor_creation_failed", exc.message)

    async def _after_steers(self, turn: Turn, create: CreateRequest) -> tuple[CreateRequest | None, list[Steer]]:
        """Once a response has ended: acknowledge the steers that came too late for its stream, then start their
        successor, or queue them while the response waits for tool outputs."""
        response = turn.response
        steered = response.incomplete_details is not None and response.incomplete_details.reason == "steered"
        self.steering.end(response.id, response.status, response.output, steered=steered)
        steers = list(turn.steers)
        for steer in turn.late_steers():
            await self._steer_reply(SteerAccepted, response.id, steer=steer.ref())
        if not steers:
            return None, []
        waiting = self.steering.ended[response.id].waiting
        if response.status not in ("completed", "incomplete"):
            for steer in steers:
                ref = steer.failed_ref()
                await self._steer_failed(response.id, ref, "response_not_active", "The response did not end normally.")
            return None, []
        if waiting:  # it ended with calls: the steers wait for the create that answers them
            for steer in steers:
                try:
                    self.steering.queue(steer)
                except SteerRefused as refused:
                    await self._steer_failed(response.id, steer.failed_ref(), refused.code, refused.message)
                    continue
                await self._pending(steer, waiting)
            return None, []
        return successor(create, response.id, steers), steers

    # -- lifetime --------------------------------------------------------------------------------------------------

    async def _age_timer(self) -> None:
        """Wake at the age limit or when the server starts draining, whichever comes first."""
        started = self.service.drain.started
        # Loop timers may fire a little early against time.monotonic(): wait until the limit has really passed.
        while not self.router.expired() and not started.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(started.wait(), max(self.router.remaining(), 0.001))
        await self._maybe_close_expired()

    async def _maybe_close_expired(self) -> None:
        """Close 1001 when the protocol state says so (§3.11: the age limit, or a drain, with no work left)."""
        close = self.state.close_now(self.service.drain.draining) if not self.closed.is_set() else None
        if close is None:
            return
        self.closed.set()
        if close.limit_error:
            with contextlib.suppress(Exception):
                await self.send_error(self.router.connection_limit_error())
        with contextlib.suppress(Exception):
            await self.writer.close(CLOSE_GOING_AWAY)

    async def going_away(self) -> None:
        """The end of a shutdown: close 1001 now, whatever is left (every response has ended by then)."""
        if not self.closed.is_set():
            self.closed.set()
            with contextlib.suppress(Exception):
                await self.writer.close(CLOSE_GOING_AWAY)

    async def shutdown(self) -> None:
        for task in self.workers.values():
            task.cancel()
        if self.workers:
            await asyncio.gather(*self.workers.values(), return_exceptions=True)
        self.workers.clear()
        self.session.clear()


class _Routing(msgspec.Struct):
    """The routing fields of a create frame that failed to decode, read leniently."""

    stream_id: Any = None
    previous_response_id: Any = None


def _routing_of(data: str | bytes) -> _Routing:
    try:
        return msgspec.json.decode(data, type=_Routing)
    except msgspec.DecodeError:  # ValidationError included
        return _Routing()


def _copy_request(request: CreateRequest, **changes: Any) -> CreateRequest:
    return msgspec.structs.replace(request, **changes)


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
    try:
        await websocket.accept(subprotocol=selected_subprotocol(websocket.headers))
        session = service.session(owner, caching=True)
        default_model = websocket.query_params.get("model") or None  # other query parameters are ignored (§3.1)
        await Connection(websocket, service, session, default_model).run()
    finally:
        gauge.dec()
        release_connection(service, owner)
