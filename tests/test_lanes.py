"""WebSocket mode's lanes, limits and lifetime without a socket (protocol.md §3.5, §3.9, §3.10, §3.11): the lane
router, the connection protocol's answers to frames (pipeline/connection/protocol.py) with the clock moved by
hand, its close decisions, the numbering of replies outside a stream, and the decoding of client frames. Steering
and runs on a built service: tests/test_connection.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from hotloop.errors import HotloopError, InvalidJSON
from hotloop.pipeline.admission.lanes import LaneLimits, LaneRouter, QueueFull
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
)
from hotloop.pipeline.connection.protocol import ConnectionProtocol
from hotloop.pipeline.connection.responses import KEPT, Responses, Stream
from hotloop.pipeline.state.drain import Drain
from hotloop.pipeline.state.session import Lane, Session
from hotloop.wire.request import (
    MAX_TOOLS,
    AppendEvent,
    CreateEvent,
    CreateRequest,
    InvalidCreate,
    ProcessedEvent,
    SteerEvent,
    decode_client_event,
)
from hotloop.wire.response import Response

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

LIMIT = "websocket_connection_limit_reached"


class Clock:
    """Monotonic seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingSession(Session):
    """A session that records the parents evicted from its lanes (§3.8.3)."""

    def __init__(self) -> None:
        super().__init__("", caching=True)
        self.evicted: list[tuple[Lane, str | None]] = []

    def evict(self, lane: Lane, response_id: str | None) -> None:
        self.evicted.append((lane, response_id))


def _protocol(clock: Clock | None = None, drain: Drain | None = None, **limits: Any) -> ConnectionProtocol:
    session = RecordingSession()
    return ConnectionProtocol(session, LaneLimits(**limits), drain or Drain(), clock=clock or Clock())


def _create(**body: Any) -> bytes:
    return msgspec.json.encode({"type": "response.create", "model": "m", "input": "hi", **body})


def _sent(actions: list[Action]) -> list[dict[str, Any]]:
    return [msgspec.json.decode(action.data) for action in actions if isinstance(action, Send)]


def _error(actions: list[Action]) -> dict[str, Any]:
    [frame] = _sent(actions)
    assert frame["type"] == "error" and "sequence_number" not in frame
    return frame


# -- the lane router ---------------------------------------------------------------------------------------------


def test_stream_id_validation() -> None:
    router = LaneRouter(LaneLimits(), Clock())
    assert router.admit(None) is None
    assert router.admit("agent_1.a-b") == "agent_1.a-b"
    for bad in ["", "has space", "x" * 257, "ünï"]:
        with pytest.raises(HotloopError) as info:
            router.admit(bad)
        assert info.value.code == "invalid_stream_id" and info.value.param == "stream_id"


def test_named_lane_limit_counts_distinct_ids_forever() -> None:
    router = LaneRouter(LaneLimits(max_named_lanes=2), Clock())
    router.admit("a")
    router.admit("b")
    router.admit("a")  # reuse is fine
    with pytest.raises(HotloopError) as info:
        router.admit("c")
    assert info.value.code == "websocket_stream_limit_reached"
    router.admit(None)  # the default lane is not counted


def test_queue_cap() -> None:
    router = LaneRouter(LaneLimits(max_queued=2), Clock())
    router.admit(None)
    router.admit(None)
    with pytest.raises(QueueFull):
        router.admit(None)
    router.started()
    router.admit(None)


def test_age_limit_error() -> None:
    clock = Clock()
    router = LaneRouter(LaneLimits(max_age_s=3600), clock)
    clock.now = 3599.5
    assert router.remaining() == 0.5 and router.admit(None) is None
    clock.now = 3600
    with pytest.raises(HotloopError) as info:
        router.admit(None)
    assert info.value.code == LIMIT
    assert info.value.message.startswith("Responses websocket connection limit reached (60 minutes).")


def test_lanes_off_share_one_fifo() -> None:
    assert LaneRouter(LaneLimits(lanes=False)).queue_of("a") is None
    assert LaneRouter(LaneLimits(lanes=True)).queue_of("a") == "a"


# -- frames in, actions out --------------------------------------------------------------------------------------


def test_a_create_joins_its_lane_and_runs_at_its_head() -> None:
    protocol = _protocol()
    [enqueue] = protocol.receive_frame(_create(stream_id="agent_1"))
    assert isinstance(enqueue, Enqueue) and enqueue.queue == "agent_1"
    assert isinstance(enqueue.work, QueuedCreate) and enqueue.work.lane == "agent_1"
    assert (protocol.busy, protocol.router.waiting) == (1, 1)
    protocol.dequeued()
    [run] = protocol.at_head(enqueue.work)
    assert isinstance(run, Run) and run.steers == () and run.lane == "agent_1"
    assert run.create.input == "hi"
    options = run.options
    assert (options.websocket, options.lane, options.stream_id, options.transport) == (
        True,
        "agent_1",
        "agent_1",
        "websocket",
    )
    assert protocol.job_done() == [] and protocol.busy == 0  # young: it stays open


def test_the_upgrades_model_and_timings_reach_the_run() -> None:
    """`?model=` fills a create without a model (§3.1); the timing header reaches every run's options."""
    session = Session("", caching=True)
    protocol = ConnectionProtocol(session, LaneLimits(), Drain(), default_model="hotloop-sim", timings=True)
    frame = msgspec.json.encode({"type": "response.create", "input": "hi"})
    [enqueue] = protocol.receive_frame(frame)
    assert isinstance(enqueue, Enqueue)
    [run] = protocol.at_head(enqueue.work)
    assert isinstance(run, Run) and run.create.model == "hotloop-sim" and run.options.include_timings


def test_lanes_off_run_every_lane_on_one_fifo_and_still_echo_the_id() -> None:
    protocol = _protocol(lanes=False)
    [enqueue] = protocol.receive_frame(_create(stream_id="b"))
    assert isinstance(enqueue, Enqueue) and enqueue.queue is None
    [run] = protocol.at_head(enqueue.work)
    assert isinstance(run, Run) and run.options.stream_id == "b"


def test_an_invalid_stream_id_is_a_connection_level_error_without_the_id() -> None:
    protocol = _protocol()
    frame = _error(protocol.receive_frame(_create(stream_id="has space")))
    assert frame["status"] == 400 and "stream_id" not in frame
    assert (frame["error"]["code"], frame["error"]["param"]) == ("invalid_stream_id", "stream_id")
    assert protocol.busy == 0 and not protocol.closed


def test_the_named_lane_past_the_limit_is_refused_with_its_id_and_not_run() -> None:
    protocol = _protocol(max_named_lanes=2)
    for lane in ("a", "b", "a", None):
        assert isinstance(protocol.receive_frame(_create(stream_id=lane))[0], Enqueue)
    frame = _error(protocol.receive_frame(_create(stream_id="c")))
    assert frame["stream_id"] == "c" and frame["error"]["code"] == "websocket_stream_limit_reached"
    assert protocol.busy == 4


def test_past_the_queue_cap_the_connection_closes_1008() -> None:
    protocol = _protocol(max_queued=2)
    assert all(isinstance(protocol.receive_frame(_create())[0], Enqueue) for _ in range(2))
    protocol.dequeued()  # the first left its FIFO: it no longer counts as waiting
    assert isinstance(protocol.receive_frame(_create())[0], Enqueue)
    assert protocol.receive_frame(_create()) == [Close(CLOSE_POLICY, "too many queued response.create events")]
    assert protocol.closed  # the transport reads nothing more
    assert protocol.going_away() == []  # closed once


def test_a_create_past_the_age_limit_gets_its_error_then_the_idle_connection_closes() -> None:
    clock = Clock()
    protocol = _protocol(clock, max_age_s=10)
    clock.now = 10
    actions = protocol.receive_frame(_create(stream_id="a"))
    assert _error(actions[:1])["error"]["code"] == LIMIT and _error(actions[:1])["stream_id"] == "a"
    assert actions[1:] == [Close(CLOSE_GOING_AWAY)]  # the error went out: not a second time
    assert protocol.timer() == []


def test_work_reaching_its_head_past_the_age_limit_is_answered_not_run() -> None:
    clock = Clock()
    protocol = _protocol(clock, max_age_s=10)
    queued = [protocol.receive_frame(_create(stream_id="a"))[0], protocol.receive_frame(_create())[0]]
    clock.now = 11
    assert protocol.timer() == []  # work is left: it may finish
    for enqueue in queued:
        assert isinstance(enqueue, Enqueue) and isinstance(enqueue.work, QueuedCreate)
        protocol.dequeued()
        frame = _error(protocol.at_head(enqueue.work))
        assert frame["error"]["code"] == LIMIT and frame.get("stream_id") == enqueue.work.lane
    assert protocol.job_done() == []  # one is still held
    assert protocol.job_done() == [Close(CLOSE_GOING_AWAY)]  # no work left; the error already went out


def test_the_connection_closes_when_idle_past_its_age_and_says_why_once() -> None:
    clock = Clock()
    protocol = _protocol(clock, max_age_s=10)
    clock.now = 5
    assert protocol.timer() == []  # young and idle: stays open
    clock.now = 20
    actions = protocol.timer()
    frame = _error(actions[:1])
    assert frame["error"]["code"] == LIMIT and "stream_id" not in frame
    assert actions[1:] == [Close(CLOSE_GOING_AWAY)]
    assert protocol.timer() == [] and protocol.closed


def test_a_drain_closes_the_idle_connection_without_an_error() -> None:
    drain = Drain()
    protocol = _protocol(drain=drain)
    assert isinstance(protocol.receive_frame(_create())[0], Enqueue)
    drain.begin()
    assert protocol.timer() == []  # a create is held: it finishes first
    assert protocol.job_done() == [Close(CLOSE_GOING_AWAY)]
    assert protocol.going_away() == []


def test_going_away_closes_whatever_is_left() -> None:
    protocol = _protocol()
    protocol.receive_frame(_create())
    assert protocol.going_away() == [Close(CLOSE_GOING_AWAY)]
    assert protocol.going_away() == [] and protocol.timer() == []


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"{", "invalid_json"),
        (b"[1]", "invalid_event"),
        (b'{"type": "response.cancel"}', "unknown_event_type"),
        (b'{"type": "response.append", "input": 5}', "invalid_type"),
    ],
)
def test_a_bad_frame_is_answered_at_once(frame: bytes, code: str) -> None:
    protocol = _protocol()
    assert _error(protocol.receive_frame(frame))["error"]["code"] == code
    assert protocol.busy == 0


def test_a_create_that_does_not_decode_is_answered_on_its_lane_and_evicts_its_parent() -> None:
    protocol = _protocol()
    frame = _create(temperature="hot", stream_id="a", previous_response_id="resp_parent")
    [enqueue] = protocol.receive_frame(frame)
    assert isinstance(enqueue, Enqueue) and isinstance(enqueue.work, QueuedError)
    session = protocol.session
    assert isinstance(session, RecordingSession) and session.evicted == []  # nothing before its turn (§3.9)
    error = _error(protocol.at_head(enqueue.work))
    assert (error["stream_id"], error["error"]["param"], error["error"]["code"]) == ("a", "temperature", "invalid_type")
    assert session.evicted == [("a", "resp_parent")]
    # Without a usable lane it is a connection-level error, at once.
    unusable = _error(protocol.receive_frame(_create(temperature="hot", stream_id=5)))
    assert unusable["error"]["param"] == "temperature" and "stream_id" not in unusable


def test_an_append_without_a_latest_response_is_refused_at_its_head() -> None:
    protocol = _protocol()
    [enqueue] = protocol.receive_frame(b'{"type": "response.append", "input": "more"}')
    assert isinstance(enqueue, Enqueue) and enqueue.queue is None and enqueue.work == QueuedAppend("more")
    error = _error(protocol.at_head(enqueue.work))
    assert (error["error"]["code"], error["error"]["param"]) == ("previous_response_not_found", "input")


def test_an_acknowledgement_gets_no_reply() -> None:
    assert _protocol().receive_frame(b'{"type": "response.processed", "response_id": "resp_1"}') == []


# -- replies outside a stream (§3.6) ---------------------------------------------------------------------------


def _stream(responses: Responses, response_id: str, lane: Lane) -> Stream:
    turn: Any = SimpleNamespace(response=Response(id=response_id, created_at=0, model="m", status="completed"))
    return responses.start(turn, CreateRequest(), lane)


def test_a_reply_takes_the_next_number_after_the_events_sent_and_the_replies_since() -> None:
    responses = Responses()
    stream = _stream(responses, "resp_1", "a")
    stream.sent = 3
    assert responses.reply_to("resp_1") == ("a", 3)
    assert responses.reply_to("resp_1") == ("a", 4)  # two replies between two events
    stream.sent = 4  # the stream goes on from its own count
    assert responses.reply_to("resp_1") == ("a", 4)
    stream.sent = 9
    responses.end(stream)
    assert "resp_1" not in responses.running
    assert [responses.reply_to("resp_1") for _ in range(2)] == [("a", 9), ("a", 10)]  # after its terminal event
    assert responses.reply_to("resp_other") == (None, 0) and responses.reply_to(None) == (None, 0)


def test_ended_responses_are_remembered_up_to_a_bound() -> None:
    responses = Responses()
    for number in range(KEPT + 10):
        stream = _stream(responses, f"resp_{number}", "lane")
        stream.sent = 7
        responses.end(stream)
    assert responses.reply_to(f"resp_{KEPT + 9}") == ("lane", 7)
    assert responses.reply_to("resp_0") == (None, 0)  # bounded: the oldest are forgotten
    assert len(responses.ended) == KEPT


# -- decoding ------------------------------------------------------------------------------------------------------


def test_frames_decode_once_into_their_event() -> None:
    create = decode_client_event(b'{"type": "response.create", "model": "m", "input": "hi", "stream_id": "a"}')
    assert isinstance(create, CreateEvent) and (create.model, create.stream_id) == ("m", "a")
    assert isinstance(decode_client_event('{"type": "response.append", "input": []}'), AppendEvent)
    steer = decode_client_event(b'{"type": "response.steer", "previous_response_id": "resp_1", "input": "x"}')
    assert isinstance(steer, SteerEvent) and steer.previous_response_id == "resp_1"
    assert isinstance(decode_client_event(b'{"type": "response.processed", "response_id": "r"}'), ProcessedEvent)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"[1, 2]", "invalid_event"),
        (b'{"model": "m"}', "invalid_event"),
        (b'{"type": 5}', "invalid_event"),
        (b'{"type": "response.cancel"}', "unknown_event_type"),
        (b'{"type": "response.append", "input": 5}', "invalid_type"),
        (b'{"type": "response.create", "input": [', "invalid_json"),
    ],
)
def test_bad_frames_are_named(frame: bytes, code: str) -> None:
    with pytest.raises((HotloopError, InvalidJSON)) as info:
        decode_client_event(frame)
    assert info.value.code == code  # type: ignore[union-attr]


def test_a_create_with_a_bad_field_is_still_a_create() -> None:
    """It is answered on its lane (§3.9): the error names the field."""
    with pytest.raises(InvalidCreate) as info:
        decode_client_event(b'{"type": "response.create", "temperature": "hot", "stream_id": "a"}')
    assert (info.value.error.param, info.value.error.code) == ("temperature", "invalid_type")
    tools = b",".join(b'{"type": "function", "name": "f"}' for _ in range(MAX_TOOLS + 1))
    with pytest.raises(InvalidCreate) as limit:
        decode_client_event(b'{"type": "response.create", "tools": [' + tools + b"]}")
    assert (limit.value.error.param, limit.value.error.code) == ("tools", "array_above_max_length")
