"""WebSocket lane rules without a socket (protocol.md §3.5, §3.9, §3.11)."""

from __future__ import annotations

import pytest

from hotloop.errors import HotloopError
from hotloop.pipeline.lanes import LaneLimits, LaneRouter, QueueFull


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
