"""The opt-in `hotloop:timing_metrics` event (header `x-responsesapi-include-timing-metrics: true`): on SSE and on
every response of a WebSocket connection upgraded with the header, just before the terminal event and numbered in
sequence; absent without the header; a JSON POST has no event stream, so its usage record carries the timings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from conftest import RunningServer, start_server
from http_support import check_sequence as check_http_sequence
from http_support import parse_sse, usage_record
from wsutil import WS, final, user
from wsutil import check_sequence as check_ws_sequence

SIM = "hotloop-sim"
HEADER = "x-responsesapi-include-timing-metrics"
EVENT = "hotloop:timing_metrics"
BLOCKED = "deploy with AKIA" + "Q7XR2M9K4ZP3W8N6"  # a fake AWS key id: blocked before generation
REQUIRED_STAGES = {"validate", "resolve", "render", "pre_inference", "post_inference"}


@pytest.fixture(scope="module")
def tserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # Secrets blocked: a failed response's timing event can be checked too (clean inputs are unaffected).
    running = start_server(
        tmp_path_factory.mktemp("timings"), models=[SIM], ledger_flush_ms=10.0, safety_secrets="block"
    )
    yield running
    running.stop()


@pytest.fixture
def http(tserver: RunningServer) -> Iterator[httpx.Client]:
    with tserver.http() as client:
        yield client


class HeaderWS(WS):
    """The raw test client, upgraded with extra headers."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.conn = connect(url, additional_headers=headers, open_timeout=10)


def check_timing_event(event: dict[str, Any], response_id: str, *, generated: bool = True) -> dict[str, float]:
    assert event["type"] == EVENT, event
    assert set(event) - {"stream_id"} == {"type", "sequence_number", "response_id", "timings"}, event
    assert event["response_id"] == response_id
    timings: dict[str, float] = event["timings"]
    assert set(timings) >= REQUIRED_STAGES, timings
    if generated:
        assert {"ttft", "generate"} <= set(timings), timings
    for stage, value in timings.items():
        assert isinstance(value, int | float) and not isinstance(value, bool), (stage, value)
        assert value >= 0, (stage, value)
    return timings


def timing_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == EVENT]


def check_before_terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Exactly one timing event, right before the terminal one; numbering has no gap (checked by the caller)."""
    found = timing_events(events)
    assert len(found) == 1, [event["type"] for event in events]
    assert events[-2] is found[0], [event["type"] for event in events[-3:]]
    assert found[0]["sequence_number"] == events[-1]["sequence_number"] - 1
    return found[0]


# -- SSE ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "1"])
def test_sse_with_header(http: httpx.Client, value: str) -> None:
    reply = http.post("/responses", json={"model": SIM, "input": "hello", "stream": True}, headers={HEADER: value})
    assert reply.status_code == 200, reply.text
    events = parse_sse(reply.text)  # every other event schema-checked (the extension type is exempt)
    response = check_http_sequence(events)
    assert response["status"] == "completed"
    event = check_before_terminal(events)
    check_timing_event(event, response["id"])


@pytest.mark.parametrize("headers", [{}, {HEADER: "false"}, {HEADER: "0"}, {HEADER: ""}, {HEADER: "yes please"}])
def test_sse_without_header(http: httpx.Client, headers: dict[str, str]) -> None:
    reply = http.post("/responses", json={"model": SIM, "input": "hello", "stream": True}, headers=headers)
    assert reply.status_code == 200, reply.text
    events = parse_sse(reply.text)
    check_http_sequence(events)
    assert timing_events(events) == []


def test_sse_prewarm_with_header(http: httpx.Client) -> None:
    body = {"model": SIM, "input": "warm", "stream": True, "generate": False}
    reply = http.post("/responses", json=body, headers={HEADER: "true"})
    events = parse_sse(reply.text)
    response = check_http_sequence(events)
    event = check_before_terminal(events)
    timings = check_timing_event(event, response["id"], generated=False)
    assert "ttft" not in timings  # nothing was generated


def test_sse_continuation_with_header(http: httpx.Client) -> None:
    first = http.post("/responses", json={"model": SIM, "input": "one"}).json()
    body = {"model": SIM, "input": "two", "stream": True, "previous_response_id": first["id"]}
    events = parse_sse(http.post("/responses", json=body, headers={HEADER: "true"}).text)
    response = check_http_sequence(events)
    assert response["previous_response_id"] == first["id"]
    check_timing_event(check_before_terminal(events), response["id"])


def test_sse_failure_timing_event_precedes_error_pair(http: httpx.Client) -> None:
    reply = http.post("/responses", json={"model": SIM, "input": BLOCKED, "stream": True}, headers={HEADER: "true"})
    assert reply.status_code == 200
    events = parse_sse(reply.text)
    response = check_http_sequence(events)
    assert response["status"] == "failed"
    # The in-band `error` and `response.failed` stay a pair (protocol.md §2.9): the timings come before both.
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        EVENT,
        "error",
        "response.failed",
    ]
    check_timing_event(events[2], response["id"], generated=False)


# -- JSON -----------------------------------------------------------------------------------------------------------


def test_json_with_header_timings_in_usage_record(http: httpx.Client) -> None:
    reply = http.post("/responses", json={"model": SIM, "input": "hello"}, headers={HEADER: "true"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    response = reply.json()
    assert response["object"] == "response" and response["status"] == "completed"
    assert EVENT not in reply.text  # no event stream, and nothing of it leaks into the body
    record = usage_record(http, response["id"])
    assert record["transport"] == "http"
    timings = record["timings"]
    assert REQUIRED_STAGES | {"ttft", "generate"} <= set(timings), timings
    assert all(isinstance(value, int | float) and value >= 0 for value in timings.values()), timings


# -- WebSocket ------------------------------------------------------------------------------------------------------


def test_websocket_upgrade_header_applies_to_every_response(tserver: RunningServer) -> None:
    with HeaderWS(tserver.ws_url, {HEADER: "true"}) as ws:
        first_events = ws.turn(model=SIM, input=user("one"), store=False)
        first = final(first_events)
        check_timing_event(check_before_terminal(first_events), first["id"])
        second_events = ws.turn(model=SIM, input=user("two"), store=False, previous_response_id=first["id"])
        second = final(second_events)
        check_timing_event(check_before_terminal(second_events), second["id"])
        # A named lane gets it too, with its stream_id.
        lane_events = ws.turn(model=SIM, input=user("three"), stream_id="lane_a")
        lane = final(lane_events)
        event = check_before_terminal(lane_events)
        check_timing_event(event, lane["id"])
        assert event["stream_id"] == "lane_a"


def test_websocket_failure_has_timing_event(tserver: RunningServer) -> None:
    with HeaderWS(tserver.ws_url, {HEADER: "true"}) as ws:
        events = ws.turn(model=SIM, input=user(BLOCKED))
        response = final(events)
        assert response["status"] == "failed" and response["error"]["code"] == "content_filter"
        assert [event["type"] for event in events] == [
            "response.created",
            "response.in_progress",
            EVENT,
            "response.failed",
        ]
        check_timing_event(check_before_terminal(events), response["id"], generated=False)


def test_websocket_without_header(tserver: RunningServer) -> None:
    with WS(tserver.ws_url) as ws:
        first = final(events := ws.turn(model=SIM, input=user("one")))
        assert timing_events(events) == []
        events = ws.turn(model=SIM, input=user("two"), previous_response_id=first["id"])
        check_ws_sequence(events)
        assert timing_events(events) == []


def test_websocket_header_false(tserver: RunningServer) -> None:
    with HeaderWS(tserver.ws_url, {HEADER: "false"}) as ws:
        assert timing_events(ws.turn(model=SIM, input=user("one"))) == []


def test_websocket_error_frame_has_no_timing_event(tserver: RunningServer) -> None:
    with HeaderWS(tserver.ws_url, {HEADER: "true"}) as ws:
        frame = ws.error(model=SIM, input=user("x"), previous_response_id="resp_missing")
        assert frame["error"]["code"] == "previous_response_not_found"
        # The connection carries on, and the next response has its event.
        events = ws.turn(model=SIM, input=user("after the error"))
        check_timing_event(check_before_terminal(events), final(events)["id"])
