"""A WebSocket connection's protocol without I/O (protocol.md §3), shaped as python-websockets shapes its own: the
transport tells `ConnectionProtocol` what happened, one method per input, and performs the actions each returns
(actions.py), in order. Nothing here touches a socket, a task or a timer, so tests drive it alone
(tests/test_lanes.py, tests/test_connection.py).

Inputs:
- `receive_frame(data)`: a client frame, decoded here once. A create or an append joins its lane (`Enqueue`); a
  steer is answered (`Send`) or reaches the turn generating now; an inject (§1.12) reaches the multi-agent turn
  waiting for its outputs, or is failed; a bad frame gets an `error` (§3.10); past the queue cap the connection
  closes 1008 (§3.9).
- `at_head(work)`: queued work reached the head of its lane: `Run` it, or answer it there (§3.9, §3.11).
- `refused(run, exc)`, `started(run, turn)` (the `Stream` the transport counts sent events on), `ended(stream)`,
  `abandoned(stream)`: one run's life. Its end acknowledges the steers too late for its stream and starts their
  successor (another `Run`), queues them, or fails them (§3.6).
- `dequeued()`, `job_done()`: the lane FIFOs; `timer()`: the age limit passed or a drain began; `going_away()`: the
  end of a shutdown (§3.11).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from hotloop.errors import ConnectionLimit, HotloopError, PreviousResponseNotFound, RateLimited
from hotloop.pipeline.admission.lanes import Clock, LaneLimits, LaneRouter, QueueFull
from hotloop.pipeline.connection.actions import (
    CLOSE_GOING_AWAY,
    CLOSE_POLICY,
    Action,
    Close,
    Enqueue,
    QueuedAppend,
    QueuedCreate,
    QueuedError,
    Run,
    Send,
    Work,
)
from hotloop.pipeline.connection.responses import Ended, Responses, Steerable, Stream
from hotloop.pipeline.prepared import TurnOptions
from hotloop.pipeline.resolve import CONTINUABLE
from hotloop.pipeline.state.drain import Drain
from hotloop.pipeline.state.session import Lane, Session
from hotloop.pipeline.steering import WAITING, Steer, SteerRefused, check_room, new_steer, successor, with_steers
from hotloop.wire.events import (
    InjectFailed,
    SteerAccepted,
    SteerFailed,
    SteerPending,
    encode_event,
    websocket_error,
)
from hotloop.wire.request import (
    AppendEvent,
    CreateEvent,
    CreateRequest,
    InjectEvent,
    InvalidCreate,
    ProcessedEvent,
    SteerEvent,
    decode_client_event,
)

SteerReply = SteerAccepted | SteerPending | SteerFailed | InjectFailed
QUEUE_FULL = "too many queued response.create events"


class ConnectionProtocol:
    """One WebSocket connection: its lanes and limits (`router`), the work it holds, its responses (`responses`),
    and whether it is closing (`closed`: read nothing more)."""

    def __init__(
        self,
        session: Session,
        limits: LaneLimits,
        drain: Drain,
        *,
        default_model: str | None = None,
        timings: bool = False,
        clock: Clock = time.monotonic,
        trace: tuple[Any, Any] = (None, None),
    ) -> None:
        self.session = session
        self.router = LaneRouter(limits, clock)
        self.drain = drain
        self.responses = Responses()
        self.default_model = default_model  # `?model=` on the upgrade URL (§3.1)
        self.timings = timings  # the upgrade asked for `hotloop:timing_metrics`
        # Tracing, when on: the upgrade's `traceparent` context, and the connection's span its responses link to.
        self.trace_parent, self.trace_link = trace
        self.busy = 0  # work queued or running
        self.limit_sent = False  # the age limit's error went out (a close sends it only if not)
        self.closed = False

    def remaining(self) -> float:
        """Seconds until the age limit (§3.11): the transport's timer calls `timer()` then, or when a drain begins."""
        return self.router.remaining()

    # -- frames ---------------------------------------------------------------------------------------------------

    def receive_frame(self, data: str | bytes) -> list[Action]:
        """A client frame, decoded once into its event (wire/request.py) and dispatched with one `match`."""
        try:
            match decode_client_event(data):
                case CreateEvent() as create:
                    return self._create(create)
                case AppendEvent() as append:
                    return self._join(None, QueuedAppend(append.input))
                case SteerEvent() as steer:
                    return self._steer(steer)
                case ProcessedEvent():
                    return []  # Codex's acknowledgement (§3.6): no reply
                case InjectEvent() as inject:
                    return self._inject(inject)
        except InvalidCreate as invalid:
            return self._invalid_create(invalid.error, data)
        except HotloopError as exc:
            return [self._error(exc)]  # a connection-level error, at once (§3.9)

    def _create(self, create: CreateRequest) -> list[Action]:
        if create.model is None and self.default_model:
            create = msgspec.structs.replace(create, model=self.default_model)
        return self._join(create.stream_id, QueuedCreate(create, create.stream_id))

    def _invalid_create(self, error: HotloopError, data: str | bytes) -> list[Action]:
        """A create whose fields fail to decode is still a create on its lane (§3.9): the error waits for the lane,
        echoes its `stream_id` and evicts its `previous_response_id` (§3.8.3); nothing else of it is used."""
        routing = _routing_of(data)
        if not isinstance(routing.stream_id, str | None):
            return [self._error(error)]  # no usable lane: a connection-level error
        parent = routing.previous_response_id if isinstance(routing.previous_response_id, str) else None
        return self._join(routing.stream_id, QueuedError(error, routing.stream_id, parent))

    def _join(self, stream_id: str | None, work: Work) -> list[Action]:
        """`work` joins the lane `stream_id` names (§3.5), or is refused at once with a connection-level error, then
        a close if nothing else is left (§3.11); past the queue cap, the connection closes 1008 (§3.9)."""
        try:
            lane = self.router.admit(stream_id)
        except QueueFull:
            self.closed = True
            return [Close(CLOSE_POLICY, QUEUE_FULL)]
        except HotloopError as exc:
            echoed = None if exc.code == "invalid_stream_id" else stream_id
            return [self._error(exc, echoed), *self._close_if_done()]
        self.busy += 1
        return [Enqueue(self.router.queue_of(lane), work)]

    # -- steering (§3.6) ------------------------------------------------------------------------------------------

    def _steer(self, event: SteerEvent) -> list[Action]:
        """A steer reaches the turn generating now (acknowledged in its stream, or by `ended`), is queued for a
        response that waits for tool outputs (pending), or fails."""
        target = event.previous_response_id
        try:
            steer = new_steer(target, event.input)
            stream = self.responses.running.get(steer.target)
            if stream is None:
                return [self._pending(steer, self._wait_for(steer))]
            stream.turn.steer(steer)
            return []
        except SteerRefused as refused:
            return [self._failed(target, {"previous_response_id": target, "input": event.input}, refused)]

    def _wait_for(self, steer: Steer) -> list[dict[str, Any]]:
        """A steer for an ended response: queued until a create continues it (returns the stubs it waits for), or
        refused (`SteerRefused`)."""
        ended = self.responses.ended.get(steer.target)
        if ended is None:
            raise SteerRefused("response_not_found", f"Response '{steer.target}' is not on this connection.")
        if ended.waiting:
            _queue(ended, steer)
            return ended.waiting
        if ended.status == "completed" or (ended.status == "incomplete" and not ended.steered):
            raise SteerRefused("response_already_completed", f"Response '{steer.target}' has already completed.")
        raise SteerRefused("response_not_active", f"Response '{steer.target}' is no longer accepting steering.")

    # -- injected tool outputs (§1.12) ----------------------------------------------------------------------------

    def _inject(self, event: InjectEvent) -> list[Action]:
        """An inject reaches the turn running now synchronously, as a steer does: never through a lane, which the
        waiting response holds; its acknowledgement is in that response's own stream. A bad batch is an `error`
        (the response keeps waiting); a response no longer running fails it."""
        target = event.response_id
        stream = self.responses.running.get(target)
        if stream is None:
            ended = target in self.responses.ended
            return [self._inject_failed(target, event.input, ended)]
        try:
            stream.turn.inject(event.input)  # False: too late for its stream, failed by `ended`
        except HotloopError as exc:
            return [self._error(exc, stream.lane)]
        return []

    def _inject_failed(self, target: str, raw: list[msgspec.Raw], ended: bool) -> Send:
        if ended:
            code, message = "response_already_completed", f"Response '{target}' has already completed."
        else:
            code, message = "response_not_found", f"Response '{target}' is not on this connection."
        return self._reply(
            InjectFailed, target, response_id=target, input=raw, error={"code": code, "message": message}
        )

    def _continued(self, response_id: str | None) -> list[Steer]:
        """A create continues `response_id`: it waits for nothing more; the steers queued for it join the create."""
        ended = self.responses.ended.get(response_id) if response_id is not None else None
        if ended is None:
            return []
        queued, ended.waiting, ended.queued = ended.queued, [], []
        return queued

    # -- a lane's work --------------------------------------------------------------------------------------------

    def dequeued(self) -> None:
        """Work left its FIFO: it no longer counts against the queue cap (it still counts as held until `job_done`)."""
        self.router.started()

    def at_head(self, work: Work) -> list[Action]:
        """`work` reached the head of its lane: every reply to it follows the lane's previous response (§3.9)."""
        match work:
            case QueuedCreate(create=create, lane=lane):
                return self._run(create, lane)
            case QueuedAppend(input=input_):
                return self._append(input_)
            case QueuedError(error=error, lane=lane, parent=parent):
                if self.router.expired():
                    return [self._limit_error(lane)]
                self.session.evict(lane, parent)
                return [self._error(error, lane)]

    def _run(self, create: CreateRequest, lane: Lane) -> list[Action]:
        """Past the age limit a create gets the limit's error and runs nothing (§3.11); else it runs, followed by
        the input of the steers that waited for the response it continues (§3.6)."""
        if self.router.expired():
            return [self._limit_error(lane)]
        return [Run(with_steers(create, self._continued(create.previous_response_id)), self._options(lane))]

    def _append(self, input_: Any) -> list[Action]:
        """Legacy `response.append` (§3.6): the default lane's latest request again, continuing its response with
        this input; every field is copied but `generate` (an append after a warmup generates)."""
        latest = self.session.latest(None)
        if latest is None:
            return [self._error(PreviousResponseNotFound("(none)", param="input"))]
        changes = {"previous_response_id": latest.response.id, "input": input_, "generate": None}
        return self._run(msgspec.structs.replace(latest.request, **changes), None)

    def job_done(self) -> list[Action]:
        """A lane's work is over (answered, or run with its successors): maybe the connection closes now."""
        self.busy -= 1
        return self._close_if_done()

    # -- a run's life ---------------------------------------------------------------------------------------------

    def refused(self, run: Run, exc: HotloopError) -> list[Action]:
        """`run` was refused before it started (the transport makes a fault of its own a `ServerError`): the
        create's `error` on its lane, or for a successor its steers' failure (§3.6)."""
        if not run.steers:
            return [self._error(exc, run.lane)]
        failure = SteerRefused("successor_creation_failed", exc.message)
        return [self._failed(steer.target, steer.failed_ref(), failure) for steer in run.steers]

    def started(self, run: Run, turn: Steerable) -> Stream:
        """`run`'s turn was admitted: a steer may name it now. The transport adds one to the stream's `sent` per
        event it sends, then calls `ended` (or `abandoned` if the stream broke off)."""
        return self.responses.start(turn, run.create, run.lane)

    def abandoned(self, stream: Stream) -> None:
        """The stream broke off (the socket is gone, the connection is shutting down): nothing follows it."""
        self.responses.stop(stream)

    def ended(self, stream: Stream) -> list[Action]:
        """The stream's terminal event went out: acknowledge the steers too late for it, then start their
        successor (a `Run`, to run next on the same lane), queue them while the response waits for tool outputs,
        or fail them (§3.6)."""
        ended = self.responses.end(stream)
        turn = stream.turn
        target = turn.response.id
        actions: list[Action] = [self._inject_failed(target, raw, True) for raw in turn.late_injects()]
        actions += [self._reply(SteerAccepted, target, steer=s.ref()) for s in turn.late_steers()]
        steers = turn.steers
        if not steers:
            return actions
        if ended.status not in CONTINUABLE:
            failure = SteerRefused("response_not_active", "The response did not end normally.")
            actions += [self._failed(target, steer.failed_ref(), failure) for steer in steers]
        elif ended.waiting:  # it ended with calls: the steers wait for the create that answers them
            actions += [self._queue_or_fail(ended, steer) for steer in steers]
        elif self.router.expired():  # the successor is a create like any other (§3.11)
            actions.append(self._limit_error(stream.lane))
        else:
            create = successor(stream.create, target, list(steers))
            actions.append(Run(create, self._options(stream.lane), steers))
        return actions

    def _queue_or_fail(self, ended: Ended, steer: Steer) -> Send:
        try:
            _queue(ended, steer)
        except SteerRefused as refused:
            return self._failed(steer.target, steer.failed_ref(), refused)
        return self._pending(steer, ended.waiting)

    def _options(self, lane: Lane) -> TurnOptions:
        return TurnOptions(
            websocket=True,
            lane=lane,
            stream_id=lane,
            transport="websocket",
            include_timings=self.timings,
            trace_parent=self.trace_parent,
            trace_link=self.trace_link,
        )

    # -- lifetime (§3.11) -----------------------------------------------------------------------------------------

    def timer(self) -> list[Action]:
        """The age limit passed, or a drain began: close if no work is left (else the last `job_done` will)."""
        return self._close_if_done()

    def going_away(self) -> list[Action]:
        """The end of a shutdown: close 1001 now, whatever is left (every response has ended by then)."""
        if self.closed:
            return []
        self.closed = True
        return [Close(CLOSE_GOING_AWAY)]

    def _close_if_done(self) -> list[Action]:
        """Past the age limit, or draining for a shutdown, with no work left: close 1001, once. The age limit sends
        its error first unless it went out already; a drain closes without one."""
        draining = self.drain.draining
        if self.closed or self.busy or not (draining or self.router.expired()):
            return []
        self.closed = True
        if draining or self.limit_sent:
            return [Close(CLOSE_GOING_AWAY)]
        return [self._limit_error(None), Close(CLOSE_GOING_AWAY)]

    # -- replies --------------------------------------------------------------------------------------------------

    def _error(self, exc: HotloopError, stream_id: Lane = None) -> Send:
        if exc.code == ConnectionLimit.code:
            self.limit_sent = True
        return Send(error_frame(exc, stream_id))

    def _limit_error(self, lane: Lane) -> Send:
        return self._error(self.router.connection_limit_error(), lane)

    def _reply(self, kind: type[SteerReply], target: str | None, **fields: Any) -> Send:
        """A steer or inject reply outside the target's stream: the target's lane and its next number (§3.6)."""
        lane, number = self.responses.reply_to(target)
        return Send(encode_event(kind(sequence_number=number, stream_id=lane, **fields)).data)

    def _pending(self, steer: Steer, waiting: list[dict[str, Any]]) -> Send:
        return self._reply(SteerPending, steer.target, steer=steer.ref(), reason=WAITING, required_input=waiting)

    def _failed(self, target: str | None, steer: dict[str, Any], refused: SteerRefused) -> Send:
        error = {"type": "invalid_request_error", "code": refused.code, "message": refused.message}
        return self._reply(SteerFailed, target, steer=steer, error=error)


def error_frame(exc: HotloopError, stream_id: Lane = None) -> bytes:
    """The `error` event of a WebSocket connection (§3.10): the one place an error becomes its wire shape there."""
    payload: dict[str, Any] = exc.payload()
    if isinstance(exc, RateLimited):
        payload["headers"] = exc.headers  # retry-after and x-ratelimit-*, as over HTTP (§3.10)
    return websocket_error(exc.status, payload, stream_id)


def _queue(ended: Ended, steer: Steer) -> None:
    check_room(ended.queued)  # too_many_pending_steers
    ended.queued.append(steer)


class _Routing(msgspec.Struct):
    """The routing fields of a create frame that failed to decode, read leniently."""

    stream_id: Any = None
    previous_response_id: Any = None


def _routing_of(data: str | bytes) -> _Routing:
    try:
        return msgspec.json.decode(data, type=_Routing)
    except msgspec.DecodeError:  # ValidationError included
        return _Routing()
