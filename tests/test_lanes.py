"""WebSocket mode's protocol state without a socket (protocol.md §3.5, §3.6, §3.9, §3.10, §3.11): lanes, limits,
the connection's close decisions and steer targets, and the decoding of client frames."""

from __future__ import annotations

import pytest

from hotloop.errors import HotloopError, InvalidJSON
from hotloop.pipeline.admission.lanes import SEEN_RESPONSES, Close, ConnectionState, LaneLimits, LaneRouter, QueueFull
from hotloop.wire.request import (
    MAX_TOOLS,
    AppendEvent,
    CreateEvent,
    InvalidCreate,
    ProcessedEvent,
    SteerEvent,
    decode_client_event,
)

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


def test_stream_id_validation() -> None:
    router = LaneRouter(LaneLimits(), now=0)
    assert router.admit(None, now=1) is None
    assert router.admit("agent_1.a-b", now=1) == "agent_1.a-b"
    for bad in ["", "has space", "x" * 257, "ünï"]:
        with pytest.raises(HotloopError) as info:
            router.admit(bad, now=1)
        assert info.value.code == "invalid_stream_id" and info.value.param == "stream_id"


def test_named_lane_limit_counts_distinct_ids_forever() -> None:
    router = LaneRouter(LaneLimits(max_named_lanes=2), now=0)
    router.admit("a", now=1)
    router.admit("b", now=1)
    router.admit("a", now=1)  # reuse is fine
    with pytest.raises(HotloopError) as info:
        router.admit("c", now=1)
    assert info.value.code == "websocket_stream_limit_reached"
    router.admit(None, now=1)  # the default lane is not counted


def test_queue_cap() -> None:
    router = LaneRouter(LaneLimits(max_queued=2), now=0)
    router.admit(None, now=1)
    router.admit(None, now=1)
    with pytest.raises(QueueFull):
        router.admit(None, now=1)
    router.started()
    router.admit(None, now=1)


def test_age_limit_error() -> None:
    router = LaneRouter(LaneLimits(max_age_s=3600), now=0)
    with pytest.raises(HotloopError) as info:
        router.admit(None, now=3600)
    assert info.value.code == "websocket_connection_limit_reached"
    assert info.value.message.startswith("Responses websocket connection limit reached (60 minutes).")


def test_lanes_off_share_one_fifo() -> None:
    assert LaneRouter(LaneLimits(lanes=False)).queue_of("a") is None
    assert LaneRouter(LaneLimits(lanes=True)).queue_of("a") == "a"


def test_the_connection_closes_when_idle_past_its_age_and_says_why_once() -> None:
    state = ConnectionState(LaneLimits(max_age_s=10), now=0)
    state.router.admit(None, now=1)
    state.queued()
    assert state.close_now(draining=False, now=20) is None  # a create still runs: it may finish
    state.done()
    assert state.close_now(draining=False, now=5) is None  # young and idle: stays open
    assert state.close_now(draining=False, now=20) == Close(limit_error=True)
    assert state.close_now(draining=False, now=21) is None  # closing already


def test_a_limit_error_already_sent_is_not_sent_again_and_a_drain_sends_none() -> None:
    expired = ConnectionState(LaneLimits(max_age_s=10), now=0)
    expired.error_sent("websocket_connection_limit_reached")  # answered to a create that came too late
    assert expired.close_now(draining=False, now=20) == Close(limit_error=False)
    draining = ConnectionState(LaneLimits(max_age_s=3600), now=0)
    assert draining.close_now(draining=True, now=1) == Close(limit_error=False)


def test_steer_targets_are_the_recent_responses() -> None:
    state = ConnectionState(LaneLimits())
    assert state.steer_target("resp_unknown") == (None, 0)
    for number in range(SEEN_RESPONSES + 10):
        state.sent(f"resp_{number}", "lane", 7)
        state.finished(f"resp_{number}")
    assert state.steer_target(f"resp_{SEEN_RESPONSES + 9}") == ("lane", 7)
    assert state.steer_target("resp_0") == (None, 0)  # bounded: the oldest are forgotten
    assert len(state.seen) == SEEN_RESPONSES


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
