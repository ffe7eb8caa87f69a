"""The real model (smollm2-135m through llama.cpp), kept short: few requests, 16 to 24 output tokens each.

The model's text is never asserted; only the shape of what the server sends, usage, and cancellation.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import jsonschema
import pytest
from websockets.sync.client import connect

from conftest import RunningServer
from hotloop.backends.base import Finished, GenerationRequest, TextDelta, ToolCallStart
from hotloop.backends.output_schema import output_schema
from hotloop.chat.specs import ToolSpec
from schema import check_event, check_response

MODEL = "smollm2-135m"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": WEATHER_PARAMETERS,
}

pytestmark = pytest.mark.timeout(120)


def http_client(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": "Bearer k"}, timeout=60)


def check_finished(response: dict[str, Any], max_output_tokens: int) -> None:
    check_response(response)
    assert response["model"] == MODEL
    assert response["status"] in ("completed", "incomplete"), response.get("error")
    usage = response["usage"]
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= max_output_tokens
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert 0 <= usage["input_tokens_details"]["cached_tokens"] < usage["input_tokens"]
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
        assert usage["output_tokens"] == max_output_tokens


def sse_events(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with http.stream("POST", "/responses", json={**body, "stream": True}) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[len("data: ") :])
                assert event["type"] == name
                events.append(event)
    return events


def check_stream(events: list[dict[str, Any]], max_output_tokens: int) -> dict[str, Any]:
    for event in events:
        check_event(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] in TERMINAL
    final: dict[str, Any] = events[-1]["response"]
    check_finished(final, max_output_tokens)
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert final["output"] == done
    text = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    texts = [part["text"] for item in done if item["type"] == "message" for part in item["content"]]
    assert text == "".join(texts)
    return final


def test_http_json_then_continuation_reuses_the_kv_cache(server: RunningServer) -> None:
    with http_client(server) as http:
        first = http.post(
            "/responses",
            json={"model": MODEL, "input": "Name a colour.", "max_output_tokens": 16, "temperature": 0},
        ).json()
        check_finished(first, 16)
        assert first["output"] and first["output"][0]["type"] == "message"
        second = http.post(
            "/responses",
            json={
                "model": MODEL,
                "previous_response_id": first["id"],
                "input": "Another one?",
                "max_output_tokens": 16,
            },
        ).json()
        check_finished(second, 16)
        usage = second["usage"]
        # The parent's prompt (bar at most its last token) is still in llama.cpp's KV cache.
        assert usage["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] - 1
        assert usage["input_tokens"] > first["usage"]["input_tokens"]


def test_sse_stream(server: RunningServer) -> None:
    with http_client(server) as http:
        body = {"model": MODEL, "input": "Say hello.", "max_output_tokens": 16, "instructions": "Be brief."}
        final = check_stream(sse_events(http, body), 16)
        assert final["instructions"] == "Be brief."


def test_websocket_turn(server: RunningServer) -> None:
    with connect(server.ws_url, additional_headers={"Authorization": "Bearer k"}, open_timeout=30) as ws:
        ws.send(
            json.dumps({"type": "response.create", "model": MODEL, "input": "Count to three.", "max_output_tokens": 16})
        )
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in TERMINAL:
            events.append(json.loads(ws.recv(timeout=60)))
        check_stream(events, 16)


def test_tools_give_a_valid_call_or_a_message(server: RunningServer) -> None:
    with http_client(server) as http:
        response = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": "What is the weather in Paris? Use get_weather.",
                "tools": [WEATHER],
                "max_output_tokens": 24,
            },
        ).json()
    check_finished(response, 24)
    for item in response["output"]:
        assert item["type"] in ("function_call", "message")
        if item["type"] == "function_call":
            assert item["name"] == "get_weather"
            assert isinstance(json.loads(item["arguments"]), dict)


def test_a_multi_agent_response_offers_smollm2_the_actions(server: RunningServer) -> None:
    """smollm2 gets the multi-agent actions as functions: forced to spawn, its call is a `multi_agent_call` the
    server runs (a subagent on the same model, or an error output it reads), and the response ends."""
    from openai.types.beta.beta_response_output_item import BetaResponseOutputItem
    from pydantic import TypeAdapter

    with http_client(server) as http:
        response = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": "Split the task: spawn a helper agent to look up the weather in Paris.",
                "multi_agent": {"enabled": True},
                "tool_choice": {"type": "function", "name": "spawn_agent"},
                "max_output_tokens": 128,
                "temperature": 0,
            },
        ).json()
    check_response(response)
    assert response["status"] in ("completed", "incomplete"), response.get("error")
    # max_output_tokens bounds each agent's generations; usage sums every agent's (docs/api.md).
    assert response["usage"]["output_tokens"] > 0
    call = response["output"][0]
    assert call["type"] == "multi_agent_call" and call["action"] == "spawn_agent"
    assert call["agent"] == {"agent_name": "/root"}
    answers = [item for item in response["output"] if item["type"] == "multi_agent_call_output"]
    if len(response["output"]) > 1:  # not cut inside the call: the server ran it (a subagent, or an error)
        assert answers and answers[0]["call_id"] == call["call_id"]
    for item in response["output"]:
        TypeAdapter(BetaResponseOutputItem).validate_python(item)


def test_required_tool_and_json_schema_are_enforced_by_grammar(server: RunningServer) -> None:
    with http_client(server) as http:
        response = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": "What is the weather in Paris?",
                "tools": [WEATHER],
                "tool_choice": "required",
                "max_output_tokens": 40,
                "temperature": 0,
            },
        ).json()
        check_finished(response, 40)
        assert response["status"] == "completed"
        [call] = response["output"]
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])

        schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        }
        response = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": "Invent a person.",
                "text": {"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
                "max_output_tokens": 40,
                "temperature": 0,
            },
        ).json()
        check_finished(response, 40)
        assert response["status"] == "completed"
        jsonschema.validate(json.loads(response["output"][0]["content"][0]["text"]), schema)


def test_output_schema_rules() -> None:
    weather = ToolSpec(name="get_weather", parameters=WEATHER_PARAMETERS)
    patch = ToolSpec(name="apply_patch", kind="custom")
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}
    assert output_schema(GenerationRequest(prompt_tokens=[1])) is None
    assert output_schema(GenerationRequest(prompt_tokens=[1], text_format=fmt)) == {"type": "object"}
    assert output_schema(GenerationRequest(prompt_tokens=[1], text_format={"type": "json_object"})) == {
        "type": "object"
    }
    # tools offered with tool_choice auto: the model may answer either way, nothing is enforced
    assert output_schema(GenerationRequest(prompt_tokens=[1], tools=[weather], text_format=fmt)) is None
    required = output_schema(GenerationRequest(prompt_tokens=[1], tools=[weather, patch], tool_choice="required"))
    assert required is not None and len(required["anyOf"]) == 2
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, required)
    jsonschema.validate({"name": "apply_patch", "input": "*** Begin"}, required)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "other", "arguments": {}}, required)
    forced = output_schema(
        GenerationRequest(prompt_tokens=[1], tools=[weather, patch], tool_choice="required", forced_tool="apply_patch")
    )
    assert forced is not None and forced["properties"]["name"] == {"const": "apply_patch"}


def _llama_busy() -> bool:
    return any(thread.name == "hotloop-llama" for thread in threading.enumerate())


def test_sse_disconnect_cancels_generation(server: RunningServer) -> None:
    body = {
        "model": MODEL,
        "input": "Count from 1 to 1000, one number per line.",
        "max_output_tokens": 1500,
        "stream": True,
    }
    response_id = None
    with http_client(server) as http:
        with http.stream("POST", "/responses", json=body) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[len("data: ") :])
                    response_id = event["response"]["id"] if "response" in event else response_id
                    if event["type"] == "response.output_text.delta":
                        break
        # The connection is closed here; the worker thread stops at its next token.
        deadline = time.monotonic() + 15
        while _llama_busy() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _llama_busy(), "generation went on after the client left"
        start = time.monotonic()
        quick = http.post("/responses", json={"model": MODEL, "input": "Hi", "max_output_tokens": 16}).json()
        check_finished(quick, 16)
        assert time.monotonic() - start < 30
        assert response_id is not None
        stored = http.get(f"/responses/{response_id}").json()
        assert stored["status"] == "cancelled"
        assert stored["usage"] is None or stored["usage"]["output_tokens"] < 1500


# -- the backend itself (the server's instance, driven from the test's event loop) ------------------------------


async def _generate(backend: Any, prompt: list[int], **fields: Any) -> tuple[str, Finished]:
    deltas = [delta async for delta in backend.generate(GenerationRequest(prompt_tokens=prompt, **fields))]
    end = deltas[-1]
    assert isinstance(end, Finished)
    return "".join(delta.text for delta in deltas if isinstance(delta, TextDelta)), end


async def test_backend_greedy_seeded_stop_and_length(server: RunningServer) -> None:
    model = server.service.models.resolve(MODEL)
    backend = model.backend
    story = model.chat.tokens([{"role": "user", "content": "Tell me a long story about a cat."}])
    # temperature 0 is greedy, and max_output_tokens ends with "length"
    first = await _generate(backend, story, temperature=0.0, max_output_tokens=16)
    again = await _generate(backend, story, temperature=0.0, max_output_tokens=16)
    assert first[0] == again[0] and again[1].cached_tokens == len(story) - 1
    assert first[1].reason == "length" and first[1].output_tokens == 16
    # sampling uses the backend's fixed seed: same prompt and parameters, same output
    sampled = await _generate(backend, story, temperature=1.0, max_output_tokens=16)
    assert sampled[0] == (await _generate(backend, story, temperature=1.0, max_output_tokens=16))[0]
    # <|im_end|> stops generation and never shows in the text
    short = model.chat.tokens([{"role": "user", "content": "Say hi."}])
    text, end = await _generate(backend, short, temperature=0.0, max_output_tokens=64)
    assert end.reason == "stop" and 0 < end.output_tokens < 64
    assert "<|im_end|>" not in text and "<|im_start|>" not in text


async def test_backend_closing_the_stream_stops_the_thread(server: RunningServer) -> None:
    model = server.service.models.resolve(MODEL)
    prompt = model.chat.tokens([{"role": "user", "content": "Count from 1 to 1000."}])
    stream = model.backend.generate(GenerationRequest(prompt_tokens=prompt, max_output_tokens=1500))
    assert isinstance(await stream.__anext__(), TextDelta | ToolCallStart)
    await stream.aclose()
    deadline = time.monotonic() + 15
    while _llama_busy() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not _llama_busy()


def test_weights_stay_out_of_amx_buffers_on_an_amx_cpu(server: RunningServer) -> None:
    """llama.cpp's AMX kernels crash the process on some Sapphire Rapids machines (ggml-org/llama.cpp#20824): where
    the CPU has AMX, the model is loaded without extra buffer types; elsewhere with llama.cpp's default."""
    from hotloop.backends.local.gguf import cpu_has_amx

    llama = server.service.models.resolve(MODEL).backend._llama
    assert llama.model_params.use_extra_bufts is not cpu_has_amx()
