"""HTTP create (protocol.md §1.2, §1.6, §2): JSON and SSE, tool calls, tool_choice, continuation, headers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
from jsonschema import Draft202012Validator

from conftest import RunningServer, start_server
from http_support import (
    TIME_TOOL,
    WEATHER_TOOL,
    calls,
    check_sequence,
    output_text,
    sdk_json,
    stream_create,
)
from schema import check_event, check_response

SIM = "hotloop-sim"


def create(server: RunningServer, **body: Any) -> dict[str, Any]:
    """A JSON create through the SDK, validated; returns the wire object."""
    response = sdk_json(server.client().responses.create(model=SIM, **body))
    check_response(response)
    return response


def retrieve(server: RunningServer, response_id: str) -> dict[str, Any]:
    reply = server.http().get(f"/responses/{response_id}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    check_response(body)
    return body


def test_create_json(server: RunningServer) -> None:
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "Say hello."})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    check_response(body)
    assert body["object"] == "response" and body["id"].startswith("resp_") and len(body["id"]) >= 28
    assert body["status"] == "completed" and body["completed_at"] >= body["created_at"]
    assert body["error"] is None and body["incomplete_details"] is None
    assert body["model"] == SIM and body["store"] is True and body["background"] is False
    assert body["previous_response_id"] is None and body["instructions"] is None
    assert body["tools"] == [] and body["tool_choice"] == "auto" and body["metadata"] == {}
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    assert message["id"].startswith("msg_")
    [part] = message["content"]
    assert part["type"] == "output_text" and part["text"] and part["annotations"] == []
    usage = body["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert "cached_tokens" in usage["input_tokens_details"]
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    # The stored response equals what the create returned.
    assert retrieve(server, body["id"]) == body


def test_create_json_sdk_default_model(server: RunningServer) -> None:
    response = server.client().responses.create(input="Hi")
    check_response(sdk_json(response))
    assert response.model == SIM and response.status == "completed" and response.output_text


def test_sse_text_sequence(server: RunningServer) -> None:
    with server.http() as http:
        events = stream_create(http, {"model": SIM, "input": "Tell me something."})
    final = check_sequence(events)
    types = [event["type"] for event in events]
    deltas = [event for event in events if event["type"] == "response.output_text.delta"]
    assert len(deltas) >= 2
    expected = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert types == expected
    assert events[0]["response"]["status"] == "in_progress" and events[1]["response"]["status"] == "in_progress"
    added = events[2]["item"]
    assert added["status"] == "in_progress" and added["content"] == [] and added["role"] == "assistant"
    assert events[3]["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    text = "".join(event["delta"] for event in deltas)
    item_id = added["id"]
    for event in events[3:-2]:
        assert event["item_id"] == item_id and event["output_index"] == 0 and event["content_index"] == 0
    for event in deltas:
        assert event["logprobs"] == []
    done_text = events[-4]
    assert done_text["text"] == text and done_text["logprobs"] == []
    assert events[-3]["part"] == {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    done_item = events[-2]["item"]
    assert done_item["id"] == item_id and done_item["status"] == "completed"
    assert done_item["content"] == [events[-3]["part"]]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] > 0 and output_text(final) == text
    assert retrieve(server, final["id"]) == final


def test_sdk_stream(server: RunningServer) -> None:
    stream = server.client().responses.create(model=SIM, input="Stream please.", stream=True)
    events = [sdk_json(event) for event in stream]
    for event in events:
        check_event(event)
    final = check_sequence(events)
    assert final["status"] == "completed"
    assert output_text(final) == "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_sse_done_setting_off(tmp_path: Path) -> None:
    running = start_server(tmp_path, sse_done=False, models=[SIM])
    try:
        with running.http() as http:
            reply = http.post("/responses", json={"input": "x", "stream": True})
        assert reply.status_code == 200
        from http_support import parse_sse

        events = parse_sse(reply.text, done=False)
        assert check_sequence(events)["status"] == "completed"
        assert "[DONE]" not in reply.text
    finally:
        running.stop()


# -- function calls -------------------------------------------------------------------------------------------------


def _valid_args(call: dict[str, Any], tool: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(call["arguments"])
    Draft202012Validator(tool["parameters"]).validate(args)
    return args


def test_function_call_loop_until_k(server: RunningServer) -> None:
    """The sim calls a declared tool until K=2 calls are in the conversation, then answers with text."""
    first = create(server, input="Weather in Paris?", tools=[WEATHER_TOOL])
    [call] = calls(first)
    assert call["name"] == "get_weather" and call["status"] == "completed"
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    _valid_args(call, WEATHER_TOOL)
    assert first["tools"] == [WEATHER_TOOL]  # function tools echo description, parameters, strict
    second = create(
        server,
        previous_response_id=first["id"],
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp": 21}'}],
        tools=[WEATHER_TOOL],
    )
    [call2] = calls(second)
    assert call2["call_id"] != call["call_id"]
    _valid_args(call2, WEATHER_TOOL)
    third = create(
        server,
        previous_response_id=second["id"],
        input=[{"type": "function_call_output", "call_id": call2["call_id"], "output": "sunny"}],
        tools=[WEATHER_TOOL],
    )
    assert calls(third) == [] and output_text(third)
    assert third["previous_response_id"] == second["id"]


def test_function_call_sse_events(server: RunningServer) -> None:
    with server.http() as http:
        events = stream_create(http, {"model": SIM, "input": "time?", "tools": [TIME_TOOL]})
    final = check_sequence(events)
    types = [event["type"] for event in events]
    n = types.count("response.function_call_arguments.delta")
    assert n >= 1
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * n,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[2]["item"]
    assert added["type"] == "function_call" and added["arguments"] == "" and added["status"] == "in_progress"
    arguments = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    done = events[-3]
    assert done["arguments"] == arguments and done["name"] == "get_time" and done["item_id"] == added["id"]
    [call] = calls(final)
    assert call["arguments"] == arguments and call["call_id"] == added["call_id"]
    _valid_args(call, TIME_TOOL)


def test_function_call_output_in_full_input(server: RunningServer) -> None:
    """Without previous_response_id, a function_call in the same input makes its output valid."""
    response = create(
        server,
        input=[
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_x", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_x", "output": "rain"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert response["status"] == "completed"


def test_tool_choice_none(server: RunningServer) -> None:
    response = create(server, input="x", tools=[WEATHER_TOOL], tool_choice="none")
    assert calls(response) == [] and output_text(response)
    assert response["tool_choice"] == "none" and response["tools"] == [WEATHER_TOOL]


def test_tool_choice_required_past_k(server: RunningServer) -> None:
    """`required` makes the sim call a tool even when K calls are already in the conversation."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for index in range(2):
        history.append({"type": "function_call", "call_id": f"c{index}", "name": "get_time", "arguments": "{}"})
        history.append({"type": "function_call_output", "call_id": f"c{index}", "output": "noon"})
    auto = create(server, input=history, tools=[TIME_TOOL])
    assert calls(auto) == []
    required = create(server, input=history, tools=[TIME_TOOL], tool_choice="required")
    assert len(calls(required)) == 1 and required["tool_choice"] == "required"


def test_tool_choice_named(server: RunningServer) -> None:
    choice = {"type": "function", "name": "get_time"}
    for _ in range(3):
        response = create(server, input="x", tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=choice)
        [call] = calls(response)
        assert call["name"] == "get_time"
        _valid_args(call, TIME_TOOL)
    assert response["tool_choice"] == choice


def test_tool_choice_allowed_tools(server: RunningServer) -> None:
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}
    for prompt in ("a", "b", "c", "d"):
        response = create(server, input=prompt, tools=[TIME_TOOL, WEATHER_TOOL], tool_choice=choice)
        [call] = calls(response)
        assert call["name"] == "get_weather"
    assert response["tool_choice"] == choice
    assert [tool["name"] for tool in response["tools"]] == ["get_time", "get_weather"]


def test_parallel_tool_calls(tmp_path: Path) -> None:
    running = start_server(tmp_path, models=[SIM], sim_parallel_calls=3)
    try:
        parallel = create(running, input="x", tools=[WEATHER_TOOL, TIME_TOOL])
        assert len(calls(parallel)) == 3 and parallel["parallel_tool_calls"] is True
        assert len({call["call_id"] for call in calls(parallel)}) == 3
        with running.http() as http:
            events = stream_create(http, {"input": "y", "tools": [WEATHER_TOOL], "parallel_tool_calls": True})
        final = check_sequence(events)  # consecutive items, each closed before the next opens
        assert [item["type"] for item in final["output"]] == ["function_call"] * 3
        single = create(running, input="x", tools=[WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False)
        assert len(calls(single)) == 1 and single["parallel_tool_calls"] is False
    finally:
        running.stop()


# -- continuation -----------------------------------------------------------------------------------------------------


def test_previous_response_context(server: RunningServer) -> None:
    first = create(server, input="My name is Ada.", instructions="Be terse.")
    assert first["instructions"] == "Be terse."
    second = create(server, input="What is my name?", previous_response_id=first["id"])
    assert second["instructions"] is None  # never inherited
    assert second["previous_response_id"] == first["id"]
    usage1, usage2 = first["usage"], second["usage"]
    assert usage2["input_tokens"] > usage1["input_tokens"] + usage1["output_tokens"] - 8
    assert usage2["input_tokens_details"]["cached_tokens"] > 0
    third = create(server, input="And again?", previous_response_id=second["id"])
    assert third["usage"]["input_tokens"] > usage2["input_tokens"]
    assert third["usage"]["input_tokens_details"]["cached_tokens"] > usage2["input_tokens_details"]["cached_tokens"]
    other = create(server, input="Now?", previous_response_id=second["id"], instructions="Be verbose.")
    assert other["instructions"] == "Be verbose."
    # An empty input is valid with previous_response_id.
    fourth = create(server, input=[], previous_response_id=third["id"])
    assert fourth["status"] == "completed"


def test_continuation_equals_full_request(server: RunningServer) -> None:
    """A continuation renders exactly the model input of the equivalent full request (protocol.md §4)."""
    first = create(server, input=[{"role": "user", "content": "first"}], tools=[WEATHER_TOOL])
    new = [{"type": "function_call_output", "call_id": calls(first)[0]["call_id"], "output": "ok"}]
    full_input = [{"role": "user", "content": "first"}, *first["output"], *new]
    with server.http() as http:
        chained = http.post(
            "/responses/input_tokens",
            json={"model": SIM, "previous_response_id": first["id"], "input": new, "tools": [WEATHER_TOOL]},
        )
        full = http.post("/responses/input_tokens", json={"model": SIM, "input": full_input, "tools": [WEATHER_TOOL]})
    assert chained.status_code == 200 and full.status_code == 200, (chained.text, full.text)
    assert chained.json() == full.json()
    assert chained.json()["object"] == "response.input_tokens" and chained.json()["input_tokens"] > 0


def test_input_tokens_endpoint(server: RunningServer) -> None:
    with server.http() as http:
        short = http.post("/responses/input_tokens", json={"model": SIM, "input": "hi"})
        long = http.post("/responses/input_tokens", json={"model": SIM, "input": "hi " * 50, "instructions": "x"})
    assert short.status_code == 200 and long.status_code == 200
    assert set(short.json()) == {"object", "input_tokens"}
    assert long.json()["input_tokens"] > short.json()["input_tokens"] > 0
    response = create(server, input="hi")
    assert response["usage"]["input_tokens"] == short.json()["input_tokens"]


# -- parameters and headers -----------------------------------------------------------------------------------------


def test_unknown_top_level_keys_ignored(server: RunningServer) -> None:
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", "brand_new_field": {"a": 1}, "zzz": None})
    assert reply.status_code == 200, reply.text
    check_response(reply.json())
    assert "brand_new_field" not in reply.json()


def test_client_headers_accepted(server: RunningServer) -> None:
    headers = {
        "OpenAI-Beta": "responses_websockets=2026-02-06",
        "originator": "codex_cli_rs",
        "session_id": "0199-abc",
        "x-client-request-id": "req-1",
        "x-codex-turn-metadata": "{}",
        "version": "0.50.0",
        "OpenAI-Organization": "org-1",
        "OpenAI-Project": "proj-1",
        "X-Stainless-Lang": "python",
        "X-Stainless-Package-Version": "3.57.0",
        "X-Stainless-Retry-Count": "0",
        "User-Agent": "codex_cli_rs/0.50.0",
    }
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x"}, headers=headers)
        assert reply.status_code == 200, reply.text
        check_response(reply.json())
        events = stream_create(http, {"model": SIM, "input": "x"})
    check_sequence(events)
    client = server.client(default_headers={"OpenAI-Beta": "responses=v1", "originator": "test"})
    response = sdk_json(client.responses.create(model=SIM, input="x"))
    check_response(response)
    assert response["status"] == "completed"


def test_models_and_health(server: RunningServer) -> None:
    with server.http() as http:
        listing = http.get("/models")
        assert listing.status_code == 200
        body = listing.json()
        assert body["object"] == "list"
        ids = [model["id"] for model in body["data"]]
        assert set(ids) == {SIM, "smollm2-135m"}
        for model in body["data"]:
            assert set(model) >= {"id", "object", "created", "owned_by"} and model["object"] == "model"
            assert isinstance(model["created"], int)
            one = http.get(f"/models/{model['id']}")
            assert one.status_code == 200 and one.json() == model
        health = http.get(str(server.base_url).removesuffix("/v1") + "/healthz")
        assert health.status_code == 200
    sdk_ids = [model.id for model in server.client().models.list()]
    assert set(sdk_ids) == set(ids)


def test_sdk_retrieve_and_stream_round_trip(server: RunningServer) -> None:
    client: openai.OpenAI = server.client()
    events = [sdk_json(event) for event in client.responses.create(model=SIM, input="x", stream=True)]
    final = check_sequence(events)
    retrieved = sdk_json(client.responses.retrieve(final["id"]))
    check_response(retrieved)
    assert retrieved == final
