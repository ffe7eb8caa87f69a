"""WebSocket ordering: the default lane's FIFO, `stream_id` lanes and legacy `response.append` (§3.5, §3.6, §3.9)."""

from __future__ import annotations

import itertools

from conftest import RunningServer
from wsutil import TERMINAL, WS, by_response, check_sequence, final, user

PACED = {"sim_tps": "200", "sim_output_tokens": "40"}  # ~0.2 s per response: long enough to overlap


def test_back_to_back_creates_run_in_order(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        for n in range(4):
            ws.create(input=f"request {n}", metadata={"n": str(n), **PACED}, store=False)
        frames = ws.collect(terminals=4)
    assert not any(frame["type"] == "error" for frame in frames)
    groups = list(by_response(frames).values())
    assert len(groups) == 4
    # contiguous: each response's full sequence precedes the next response.created
    position = 0
    for n, events in enumerate(groups):
        assert frames[position : position + len(events)] == events
        position += len(events)
        check_sequence(events)
        assert final(events)["metadata"]["n"] == str(n)
        assert final(events)["status"] == "completed"


def test_named_lane_events_carry_stream_id(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        events = ws.turn(input="hi", stream_id="agent_1.x-y")
        assert all(event["stream_id"] == "agent_1.x-y" for event in events)
        events = ws.turn(input="hi")
        assert all("stream_id" not in event for event in events)


def test_invalid_stream_id(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        for bad in ("", "bad id", "x" * 257, "ünï"):
            frame = ws.error(input="hi", stream_id=bad)
            assert frame["status"] == 400
            assert frame["error"]["code"] == "invalid_stream_id" and frame["error"]["param"] == "stream_id"
            assert "stream_id" not in frame
        assert final(ws.turn(input="hi", stream_id="x" * 256))["status"] == "completed"


def test_33rd_named_lane_is_refused(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        for n in range(32):
            ws.create(input="hi", stream_id=f"lane-{n}", store=False)
        ws.create(input="hi", stream_id="lane-32", store=False)
        frames = ws.collect(terminals=32, errors=1, timeout=30)
        errors = [frame for frame in frames if frame["type"] == "error"]
        assert len(errors) == 1
        assert errors[0]["error"]["code"] == "websocket_stream_limit_reached"
        assert errors[0]["error"]["param"] == "stream_id" and errors[0]["status"] == 400
        assert errors[0]["stream_id"] == "lane-32"
        groups = by_response(frames)
        assert len(groups) == 32
        for events in groups.values():
            check_sequence(events)
            assert final(events)["status"] == "completed"
        # a known id still works, a new one still does not, the default lane is not counted
        assert final(ws.turn(input="again", stream_id="lane-7"))["status"] == "completed"
        assert ws.error(input="x", stream_id="lane-99")["error"]["code"] == "websocket_stream_limit_reached"
        assert final(ws.turn(input="default"))["status"] == "completed"


def test_lanes_run_concurrently(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        ws.create(input="a", stream_id="a", metadata=PACED, store=False)
        ws.create(input="b", stream_id="b", metadata=PACED, store=False)
        frames = ws.collect(terminals=2)
    lanes = [frame["stream_id"] for frame in frames]
    assert set(lanes) == {"a", "b"}
    # interleaved: neither lane's events form one contiguous block
    switches = sum(1 for before, after in itertools.pairwise(lanes) if before != after)
    assert switches > 1, lanes
    for lane in ("a", "b"):
        events = [frame for frame in frames if frame["stream_id"] == lane]
        check_sequence(events)
        assert final(events)["status"] == "completed"


def test_a_lane_is_fifo_while_another_runs(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        ws.create(input="a1", stream_id="a", metadata={**PACED, "n": "1"}, store=False)
        ws.create(input="a2", stream_id="a", metadata={**PACED, "n": "2"}, store=False)
        ws.create(input="b1", stream_id="b", metadata={**PACED, "n": "3"}, store=False)
        frames = ws.collect(terminals=3)
    lane_a = [frame for frame in frames if frame["stream_id"] == "a"]
    first_end = next(i for i, frame in enumerate(lane_a) if frame["type"] in TERMINAL)
    check_sequence(lane_a[: first_end + 1])
    check_sequence(lane_a[first_end + 1 :])
    assert final(lane_a[: first_end + 1])["metadata"]["n"] == "1"
    assert final(lane_a)["metadata"]["n"] == "2"
    # lane b did not wait for both of lane a's responses
    b_done = next(i for i, frame in enumerate(frames) if frame["stream_id"] == "b" and frame["type"] in TERMINAL)
    assert b_done < len(frames) - 1


def test_fork_another_lanes_response(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        parent = final(ws.turn(input="root", stream_id="a", store=False))
        events = ws.turn(input=user("branch"), stream_id="b", previous_response_id=parent["id"], store=False)
        fork = final(events)
        assert fork["status"] == "completed" and fork["previous_response_id"] == parent["id"]
        assert all(event["stream_id"] == "b" for event in events)
        assert fork["usage"]["input_tokens"] > parent["usage"]["input_tokens"]
        # the parent stays on its own lane and can be forked again, also from the default lane
        again = final(ws.turn(input=user("other"), previous_response_id=parent["id"], store=False))
        assert again["status"] == "completed"
        # a failed fork leaves the parent on its own lane (§3.8.3)
        bad = [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
        frame = ws.error(input=bad, stream_id="c", previous_response_id=parent["id"], store=False)
        assert frame["error"]["code"] == "function_call_not_found" and frame["stream_id"] == "c"
        assert final(ws.turn(input="ok", stream_id="c", previous_response_id=parent["id"]))["status"] == "completed"


def test_lane_error_echoes_stream_id(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        frame = ws.error(input="x", stream_id="lane_e", previous_response_id="resp_unknown0000000000000000")
        assert frame["error"]["code"] == "previous_response_not_found" and frame["stream_id"] == "lane_e"


def test_append_continues_the_default_lane(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        first = final(ws.turn(input="start", store=False, instructions="Be brief.", metadata={"tag": "t1"}))
        ws.send({"type": "response.append", "input": user("more")})
        events = ws.collect()
        check_sequence(events)
        second = final(events)
        assert second["status"] == "completed"
        assert second["previous_response_id"] == first["id"]
        assert second["instructions"] == "Be brief." and second["metadata"] == {"tag": "t1"}
        assert second["store"] is False
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
        assert all("stream_id" not in event for event in events)
        # a named lane's response is not the default lane's latest
        final(ws.turn(input="elsewhere", stream_id="side", store=False))
        ws.send({"type": "response.append", "input": user("once more")})
        third = final(ws.collect())
        assert third["previous_response_id"] == second["id"]


def test_append_without_a_response(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        ws.send({"type": "response.append", "input": user("more")})
        frame = ws.recv()
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["code"] == "previous_response_not_found" and frame["error"]["param"] == "input"
        assert final(ws.turn(input="fine"))["status"] == "completed"


def test_invalid_create_body_waits_for_its_lane(server: RunningServer) -> None:
    """A create whose fields fail to decode is still a create: its error follows the lane's running response
    and echoes its stream_id (§3.9, §3.10); it also evicts its previous_response_id (§3.8.3)."""
    with WS(server.ws_url) as ws:
        ws.create(input="first", metadata=PACED, store=False)
        ws.create(input="x", temperature="hot")
        frames = ws.collect(terminals=1, errors=1)
        assert frames[-1]["type"] == "error", [frame["type"] for frame in frames]
        assert frames[-1]["error"]["param"] == "temperature" and "stream_id" not in frames[-1]
        parent = final(frames[:-1])
        ws.create(input="y", stream_id="named", metadata=PACED, store=False)
        ws.create(input="y", stream_id="named", tools="nope", previous_response_id=parent["id"])
        frames = ws.collect(terminals=1, errors=1)
        assert frames[-1]["type"] == "error" and frames[-1]["stream_id"] == "named"
        assert frames[-1]["error"]["param"] == "tools"
        # the failed create named the default lane's response from lane "named": that fork's failure leaves it
        assert final(ws.turn(input="z", previous_response_id=parent["id"], store=False))["status"] == "completed"
        frame = ws.error(input="x", stream_id=5)
        assert frame["error"]["param"] == "stream_id" and "stream_id" not in frame
