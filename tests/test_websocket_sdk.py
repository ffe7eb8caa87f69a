"""WebSocket mode through openai-python 3.57: `client.responses.connect()` and its lane session (protocol.md §5.1)."""

from __future__ import annotations

import json
import threading
from typing import Any

import openai
import pytest
from jsonschema import Draft202012Validator
from openai.lib.responses_websocket import ResponsesWebSocketLimits, ResponsesWebSocketSession
from openai.types.responses import Response, ResponseSteerFailedEvent
from openai.types.responses.responses_server_event import ResponseWsError

from conftest import RunningServer
from websocket_sdk_support import run_turn, ws_client
from wsutil import WEATHER, check_frame

TIME = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}},
}
TOOLS: dict[str, dict[str, Any]] = {tool["name"]: tool for tool in (WEATHER, TIME)}  # type: ignore[misc]


def test_tool_loop_without_storage(server: RunningServer) -> None:
    """hotloop-sim calls declared tools until K=2 calls are in the conversation, then answers (store: false)."""
    client = ws_client(server)
    with client.responses.connect() as conn:
        response, _ = run_turn(
            conn, model="hotloop-sim", input="What's the weather and time?", tools=[WEATHER, TIME], store=False
        )
        calls_seen = 0
        for _ in range(5):
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            outputs = []
            for call in calls:
                calls_seen += 1
                assert call.call_id.startswith("call_") and call.id and call.id.startswith("fc_")
                assert call.name in TOOLS and call.status == "completed"
                Draft202012Validator(TOOLS[call.name]["parameters"]).validate(json.loads(call.arguments))
                outputs.append({"type": "function_call_output", "call_id": call.call_id, "output": "42"})
            previous = response
            response, _ = run_turn(
                conn,
                model="hotloop-sim",
                previous_response_id=previous.id,
                input=outputs,
                tools=[WEATHER, TIME],
                store=False,
            )
            assert response.previous_response_id == previous.id and response.status == "completed"
            assert response.usage is not None and response.usage.input_tokens > previous.usage.input_tokens  # type: ignore[union-attr]
        assert calls_seen == 2
        assert response.status == "completed" and response.output_text
        assert response.output[-1].type == "message"
    # nothing of it was stored
    with server.http() as http:
        assert http.get(f"/responses/{response.id}").status_code == 404


def test_stored_chain_is_readable_over_http(server: RunningServer) -> None:
    client = ws_client(server)
    ids: list[str] = []
    with client.responses.connect() as conn:
        first, _ = run_turn(conn, model="hotloop-sim", input="Hello there", store=True, metadata={"turn": "1"})
        second, _ = run_turn(conn, input="And then?", previous_response_id=first.id, store=True)
        ids = [first.id, second.id]
        finals = {first.id: first, second.id: second}
    for response_id in ids:
        stored = client.responses.retrieve(response_id)
        assert stored.status == "completed"
        assert stored.model_dump()["output"] == finals[response_id].model_dump()["output"]
        assert stored.output_text == finals[response_id].output_text
    assert client.responses.retrieve(ids[1]).previous_response_id == ids[0]
    items = client.responses.input_items.list(ids[1])
    assert [item.type for item in items.data] == ["message"]
    # and continuable over HTTP too
    third = client.responses.create(model="hotloop-sim", input="Finally", previous_response_id=ids[1])
    assert third.status == "completed"


def test_base_url_alone_gives_the_socket_url(server: RunningServer) -> None:
    client = server.client()  # no websocket_base_url: http → ws + /responses
    with client.responses.connect() as conn:
        response, typed = run_turn(conn, input="hi", store=False)
        assert response.status == "completed"
        assert typed[0].type == "response.created" and typed[-1].type == "response.completed"


def test_warmup_through_the_sdk(server: RunningServer) -> None:
    client = ws_client(server)
    with client.responses.connect() as conn:
        instructions = "Answer in one sentence. " * 20
        warm, typed = run_turn(conn, instructions=instructions, tools=[WEATHER], input=[], generate=False, store=False)
        assert [event.type for event in typed] == ["response.created", "response.in_progress", "response.completed"]
        assert warm.output == [] and warm.usage is not None and warm.usage.output_tokens == 0
        real, _ = run_turn(
            conn,
            instructions=instructions,
            tools=[WEATHER],
            input="Weather in Paris?",
            previous_response_id=warm.id,
            store=False,
        )
        assert real.status == "completed" and real.usage is not None
        assert real.usage.input_tokens_details.cached_tokens > 0


def test_error_event_is_typed(server: RunningServer) -> None:
    client = ws_client(server)
    with client.responses.connect() as conn:
        conn.response.create(model="hotloop-sim", input="hi", background=True)
        data = conn.recv_bytes()
        check_frame(json.loads(data))
        event = conn.parse_event(data)
        assert isinstance(event, ResponseWsError)
        assert event.status == 400 and event.sequence_number is None
        assert event.error.code == "unsupported_parameter" and event.error.param == "background"
        assert event.error.type == "invalid_request_error" and event.error.message
        # dispatch_events raises on an unhandled error
        conn.response.create(model="hotloop-sim", input="hi", previous_response_id="resp_missing0000000000000000")
        with pytest.raises(openai.OpenAIError, match="previous_response_not_found"):
            conn.dispatch_events()


def test_a_steer_for_a_finished_response_is_answered_with_steer_failed(server: RunningServer) -> None:
    client = ws_client(server)
    with client.responses.connect() as conn:
        response, typed = run_turn(conn, input="hi", store=False)
        conn.response.steer(previous_response_id=response.id, input="shorter please")
        event = conn.recv()
        assert isinstance(event, ResponseSteerFailedEvent)
        assert event.error.code == "response_already_completed"
        assert event.sequence_number == len(typed)


def test_lanes_through_the_sdk_session(server: RunningServer) -> None:
    client = ws_client(server)
    paced = {"sim_tps": "200", "sim_output_tokens": "40"}
    limits = ResponsesWebSocketLimits(
        max_lanes=4, max_events_per_lane=10_000, max_events=20_000, max_bytes_per_lane=1 << 24, max_bytes=1 << 25
    )
    with client.responses.connect() as conn, ResponsesWebSocketSession(conn, limits=limits) as session:
        lanes = {name: session.lane(name) for name in ("left", "right")}
        for name, lane in lanes.items():
            lane.send({"type": "response.create", "model": "hotloop-sim", "input": name, "metadata": paced})
        results: dict[str, Response] = {}

        def collect(name: str) -> None:
            results[name] = lanes[name].get_final_response(timeout=10)

        threads = [threading.Thread(target=collect, args=(name,)) for name in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        assert set(results) == {"left", "right"}
        assert all(response.status == "completed" and response.output_text for response in results.values())
        # fork the left lane's response on the right lane
        lanes["right"].send(
            {"type": "response.create", "input": "fork", "previous_response_id": results["left"].id, "store": False}
        )
        fork = lanes["right"].get_final_response(timeout=10)
        assert fork.status == "completed" and fork.previous_response_id == results["left"].id
