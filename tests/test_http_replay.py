"""GET /v1/responses/{id}?stream=true (protocol.md §1.8): a stored response replayed as the SSE its live stream was."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from conftest import RunningServer, start_server
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import ErrorBody
from hotloop.wire.replay import replay_events
from hotloop.wire.response import ErrorInfo, Response, Usage
from http_support import TIME_TOOL, WEATHER_TOOL, check_sequence, error_of, parse_sse, stream_create
from schema import check_event

SIM = "hotloop-sim"
DELTAS = (
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
)


def replay(http: httpx.Client, response_id: str, **params: Any) -> list[dict[str, Any]]:
    reply = http.get(f"/responses/{response_id}", params={"stream": "true", **params})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["cache-control"] == "no-cache"
    return parse_sse(reply.text)


def shape(events: list[dict[str, Any]]) -> list[tuple[str, int, str | None]]:
    """(type, sequence_number, item id) of every event but the deltas, whose chunking may differ."""
    out = []
    for event in events:
        if event["type"] in DELTAS:
            continue
        item_id = event.get("item_id") or event.get("item", {}).get("id")
        out.append((event["type"], event["sequence_number"], item_id))
    return out


def delta_text(events: list[dict[str, Any]]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for event in events:
        if event["type"] in DELTAS:
            texts[event["item_id"]] = texts.get(event["item_id"], "") + event["delta"]
    return texts


def without_deltas(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in event.items() if k != "sequence_number"} for event in events if event["type"] not in DELTAS
    ]


def assert_same_stream(live: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> None:
    final = check_sequence(replayed)
    assert final == check_sequence(live)
    assert [e["type"] for e in replayed if e["type"] not in DELTAS] == [
        e["type"] for e in live if e["type"] not in DELTAS
    ]
    assert delta_text(replayed) == delta_text(live)
    # Everything but the deltas is byte-for-byte the same event (sequence numbers shift with the delta count).
    assert without_deltas(replayed) == without_deltas(live)
    if len(replayed) == len(live):
        assert shape(replayed) == shape(live)
    # One delta per non-empty text part / arguments string (documented in wire/replay.py).
    assert sum(e["type"] in DELTAS for e in replayed) == len([text for text in delta_text(live).values() if text])


def live_and_replay(server: RunningServer, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with server.http() as http:
        live = stream_create(http, {"model": SIM, **body})
        stored = http.get(f"/responses/{live[-1]['response']['id']}").json()
        assert stored == live[-1]["response"]
        return live, replay(http, stored["id"])


def test_replay_text(server: RunningServer) -> None:
    live, replayed = live_and_replay(server, {"input": "Say something long.", "metadata": {"sim_output_tokens": "40"}})
    assert_same_stream(live, replayed)
    assert replayed[-1]["type"] == "response.completed"
    assert [e["type"] for e in replayed] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert replayed[0]["response"]["status"] == "in_progress"


def test_replay_function_calls(server: RunningServer) -> None:
    live, replayed = live_and_replay(server, {"input": "weather and time?", "tools": [WEATHER_TOOL, TIME_TOOL]})
    assert_same_stream(live, replayed)
    calls = [e["item"] for e in replayed if e["type"] == "response.output_item.done"]
    assert calls and all(item["type"] == "function_call" for item in calls)
    assert {item["id"] for item in calls} == set(delta_text(live))


def test_replay_incomplete(server: RunningServer) -> None:
    body = {"input": "Talk a lot.", "max_output_tokens": 16, "metadata": {"sim_output_tokens": "200"}}
    live, replayed = live_and_replay(server, body)
    assert_same_stream(live, replayed)
    final = replayed[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][-1]["status"] == "incomplete"


def test_replay_starting_after(server: RunningServer) -> None:
    _, replayed = live_and_replay(server, {"input": "hello"})
    response_id = replayed[0]["response"]["id"]
    with server.http() as http:
        for after in (0, 3, len(replayed) - 2):
            tail = replay(http, response_id, starting_after=str(after))
            assert tail == replayed[after + 1 :]
            assert [e["sequence_number"] for e in tail] == list(range(after + 1, len(replayed)))
        assert replay(http, response_id, starting_after=str(len(replayed) + 10)) == []
        # include_obfuscation is accepted and ignored.
        assert replay(http, response_id, include_obfuscation="false") == replayed
        for bad in ("-1", "x", "1.5", "", "²"):
            reply = http.get(f"/responses/{response_id}", params={"stream": "true", "starting_after": bad})
            error_of(reply, 400, "invalid_value", "starting_after")
        # Without stream, as before: the JSON object.
        for params in ({}, {"stream": "false"}):
            plain = http.get(f"/responses/{response_id}", params=params)
            assert plain.status_code == 200 and plain.json() == replayed[-1]["response"]


def test_replay_unknown_and_other_key(tmp_path: Path) -> None:
    running = start_server(tmp_path, api_keys=["key-a", "key-b"], models=[SIM])
    try:
        with running.http("key-a") as http:
            live = stream_create(http, {"model": SIM, "input": "mine"})
            response_id = live[-1]["response"]["id"]
            assert_same_stream(live, replay(http, response_id))
            missing = http.get("/responses/resp_doesnotexist0000000000000", params={"stream": "true"})
            error_of(missing, 404, "response_not_found", "response_id")
        with running.http("key-b") as other:
            reply = other.get(f"/responses/{response_id}", params={"stream": "true", "starting_after": "2"})
            error_of(reply, 404, "response_not_found", "response_id")
    finally:
        running.stop()


def test_replay_background_waits_for_the_end(server: RunningServer) -> None:
    """A background response still generating is waited for, then replayed whole, queued event included."""
    body = {"model": SIM, "input": "slow", "background": True, "metadata": {"sim_tps": "60", "sim_output_tokens": "30"}}
    with server.http() as http:
        created = http.post("/responses", json=body).json()
        assert created["status"] in ("queued", "in_progress")
        replayed = replay(http, created["id"])
        final = check_sequence(replayed)
        assert [e["type"] for e in replayed[:3]] == ["response.created", "response.queued", "response.in_progress"]
        assert replayed[0]["response"]["status"] == "queued"
        assert final["status"] == "completed"
        assert final == http.get(f"/responses/{created['id']}").json()


def test_replay_cancelled_background(server: RunningServer) -> None:
    body = {"model": SIM, "input": "slow", "background": True, "metadata": {"sim_tps": "5"}}
    with server.http() as http:
        created = http.post("/responses", json=body).json()
        deadline = time.monotonic() + 20
        while http.get(f"/responses/{created['id']}").json()["status"] != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        cancelled = http.post(f"/responses/{created['id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        replayed = replay(http, created["id"])
    final = check_sequence(replayed)
    assert replayed[-1]["type"] == "response.failed"
    assert final == cancelled


def test_replay_stale_in_progress(tmp_path: Path) -> None:
    """A stored non-terminal response with no generation running (as after a restart) cannot be replayed."""
    running = start_server(tmp_path, models=[SIM])
    try:
        body = {"model": SIM, "input": "slow", "background": True, "metadata": {"sim_tps": "5"}}
        with running.http() as http:
            created = http.post("/responses", json=body).json()
            deadline = time.monotonic() + 20
            while http.get(f"/responses/{created['id']}").json()["status"] != "in_progress":
                assert time.monotonic() < deadline
                time.sleep(0.02)
            task = running.service.background.pop(created["id"])
            try:
                reply = http.get(f"/responses/{created['id']}", params={"stream": "true"})
                error_of(reply, 400, "invalid_value", "stream")
            finally:
                running.service.background[created["id"]] = task
            assert http.post(f"/responses/{created['id']}/cancel").json()["status"] == "cancelled"
    finally:
        running.stop()


def test_replay_through_sdk(server: RunningServer) -> None:
    client = server.client()
    with server.http() as http:
        live = stream_create(http, {"model": SIM, "input": "sdk replay", "tools": [WEATHER_TOOL]})
    response_id = live[-1]["response"]["id"]
    events = list(client.responses.retrieve(response_id, stream=True))
    replayed = [event.model_dump(mode="json", exclude_unset=True, by_alias=True) for event in events]
    for event in replayed:
        check_event(event)
    assert_same_stream(live, replayed)
    assert events[-1].type == "response.completed"
    assert events[-1].response.id == response_id
    tail = list(client.responses.retrieve(response_id, stream=True, starting_after=1))
    assert [event.sequence_number for event in tail] == list(range(2, len(events)))


# -- the pure function against a live builder ----------------------------------------------------------------------


def decoded(events: list[Any]) -> list[dict[str, Any]]:
    # Not schema-checked: custom tool call items are not in the OR schema (the server tests validate every event).
    return [json.loads(event.data) for event in events]


def fresh(background: bool = False) -> Response:
    return Response(id="resp_test", created_at=1, model=SIM, background=background)


def stored_copy(response: Response) -> Response:
    return msgspec.json.decode(msgspec.json.encode(response), type=Response)


@pytest.mark.parametrize("status", ["completed", "incomplete", "failed", "cancelled"])
@pytest.mark.parametrize("background", [False, True])
def test_replay_events_match_builder(status: str, background: bool) -> None:
    response = fresh(background)
    builder = ResponseBuilder(response)
    live = []
    if background:
        response.status = "queued"
        live += [builder.created(), builder.queued()]
        response.status = "in_progress"
    else:
        live.append(builder.created())
    live.append(builder.in_progress())
    live += builder.text_delta("Hello")
    live += builder.text_delta(", world")
    live += builder.tool_call_start("get_time", "function", None)
    live += builder.tool_call_delta('{"zone":')
    live += builder.tool_call_delta('"UTC"}')
    live += builder.tool_call_start("patch", "custom", None)
    live += builder.tool_call_delta("*** Begin")
    if status == "cancelled":
        # A cancelled live stream drops the item it cut off after its added/delta events; the store keeps only
        # finished items, so a replay cannot show the cut-off one (documented in wire/replay.py).
        live += builder.tool_call_end()
    error = ErrorInfo(code="server_error", message="The model backend failed.") if status == "failed" else None
    usage = Usage.of(10, 0, 5) if status != "cancelled" else None
    reason = "max_output_tokens" if status == "incomplete" else None
    live += builder.close(status, usage, reason=reason, error=error)
    inband = ErrorBody(type="server_error", code="server_error", message=error.message, param=None) if error else None
    live += builder.terminal(inband)
    stored = stored_copy(response)

    expected = decoded(live)
    replayed = decoded(replay_events(stored))
    assert without_deltas(replayed) == without_deltas(expected)
    assert delta_text(replayed) == delta_text(expected)
    assert [e["sequence_number"] for e in replayed] == list(range(len(replayed)))
    assert replayed[-1]["response"] == json.loads(msgspec.json.encode(stored))
    assert decoded(replay_events(stored, starting_after=2)) == replayed[3:]
    if status == "failed":
        assert replayed[-2]["type"] == "error"
    if status == "cancelled":
        types = [item["type"] for item in replayed[-1]["response"]["output"]]
        assert types == ["message", "function_call", "custom_tool_call"]


def test_replay_events_refuses_a_running_response() -> None:
    with pytest.raises(ValueError):
        replay_events(fresh())
