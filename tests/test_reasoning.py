"""Reasoning models (issue 13, protocol.md §2.6): a model's thinking streams as a `reasoning` output item before the
answer or calls of its turn, with its events (by `reasoning_events`) and `reasoning_tokens` in usage; from
hotloop-sim directly, and from an OpenAI-compatible engine's `reasoning_content` / `reasoning` (sim-engine).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server, stored_counts
from hotloop.config import Upstream
from http_support import check_sequence, error_of, parse_sse
from simengine_support import SimEngineProcess
from wsutil import WS, final, user

SIM = "hotloop-sim"
THINK = {"sim_reasoning_tokens": "12"}
RAW = ("response.reasoning_text.delta", "response.reasoning_text.done")


def _stream(http: httpx.Client, **body: Any) -> list[dict[str, Any]]:
    reply = http.post("/responses", json={"model": SIM, "input": "Think first.", "stream": True, **body})
    assert reply.status_code == 200, reply.text
    events = parse_sse(reply.text)
    check_sequence(events)  # schema-valid (OpenAI's reasoning names as Open Responses' shape), gap-free
    return events


def _reasoning_events(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events if "reasoning" in event["type"] or _is_reasoning_item(event)]


def _is_reasoning_item(event: dict[str, Any]) -> bool:
    return event.get("item", {}).get("type") == "reasoning" or event.get("part", {}).get("type") == "reasoning_text"


def test_the_thinking_streams_as_a_reasoning_item_before_the_answer(server: RunningServer) -> None:
    with server.http() as http:
        events = _stream(http, metadata=THINK, store=False)
    response = events[-1]["response"]
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["reasoning", "message"]
    reasoning = response["output"][0]
    text = reasoning["content"][0]["text"]
    assert reasoning["content"][0]["type"] == "reasoning_text" and text.startswith("Let me think:")
    assert reasoning["summary"] == [] and reasoning["status"] == "completed" and reasoning["id"].startswith("rs_")
    deltas = [event["delta"] for event in events if event["type"] == RAW[0]]
    assert "".join(deltas) == text and len(deltas) == 12
    assert [event["text"] for event in events if event["type"] == RAW[1]] == [text]
    assert _reasoning_events(events) == [
        "response.output_item.added",
        "response.content_part.added",
        *[RAW[0]] * 12,
        RAW[1],
        "response.content_part.done",
        "response.output_item.done",
    ]
    usage = response["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] == 12
    assert usage["output_tokens"] > 12  # the answer's tokens and the thinking's


def test_a_reasoning_tool_loop_over_websocket_and_the_sdk(server: RunningServer) -> None:
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    meta = {**THINK, "sim_tool_calls": "1"}
    with WS(server.ws_url) as ws:
        first = final(ws.turn(model=SIM, input=user("Weather?"), tools=[weather], metadata=meta, store=False))
        assert [item["type"] for item in first["output"]] == ["reasoning", "function_call"]
        call = first["output"][1]
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        second = final(
            ws.turn(model=SIM, input=[output], previous_response_id=first["id"], tools=[weather], metadata=meta)
        )
        assert [item["type"] for item in second["output"]] == ["reasoning", "message"]
    # The chain's reasoning reached the model: the second prompt counts as the conversation with it, not without.
    history = [{"role": "user", "content": "Weather?"}, *first["output"], output]
    with server.http() as http:

        def count(items: list[Any]) -> int:
            body = {"model": SIM, "input": items, "tools": [weather]}
            tokens: int = http.post("/responses/input_tokens", json=body).json()["input_tokens"]
            return tokens

        without = count([item for item in history if item.get("type") != "reasoning"])
        assert second["usage"]["input_tokens"] == count(history) > without
    # openai-python types the events it knows: the reasoning text's deltas arrive as typed events.
    stream = server.client().responses.create(model=SIM, input="hi", metadata=THINK, store=False, stream=True)
    typed = {type(event).__name__ for event in stream}
    assert "ResponseReasoningTextDeltaEvent" in typed and "ResponseReasoningTextDoneEvent" in typed


@pytest.fixture(scope="module")
def open_names(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("or"), models=[SIM], default_model=SIM, reasoning_events="openresponses"
    )
    yield running
    running.stop()


def test_open_responses_names_and_none(open_names: RunningServer, tmp_path: Path) -> None:
    with open_names.http() as http:
        events = _stream(http, metadata=THINK, store=False)
    kinds = {event["type"] for event in events}
    assert {"response.reasoning.delta", "response.reasoning.done"} <= kinds and not kinds & set(RAW)
    quiet = start_server(tmp_path, models=[SIM], default_model=SIM, reasoning_events="none")
    try:
        with quiet.http() as http:
            events = _stream(http, metadata=THINK, store=False)
    finally:
        quiet.stop()
    assert not [event for event in events if "reasoning" in event["type"]]
    assert not [event for event in events if event.get("part", {}).get("type") == "reasoning_text"]
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert done[0]["type"] == "reasoning" and done[0]["content"][0]["text"].startswith("Let me think:")


def test_a_stored_reasoning_response_replays_its_events(server: RunningServer) -> None:
    with server.http() as http:
        live = _stream(http, metadata=THINK, store=True)
        replay = parse_sse(http.get(f"/responses/{live[-1]['response']['id']}", params={"stream": "true"}).text)
    check_sequence(replay)
    assert [item["type"] for item in replay[-1]["response"]["output"]] == ["reasoning", "message"]
    joined = "".join(event["delta"] for event in replay if event["type"] == RAW[0])
    assert joined == live[-1]["response"]["output"][0]["content"][0]["text"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_an_engines_reasoning_fields_become_the_reasoning_item(tmp_path: Path, field: str) -> None:
    """vLLM, SGLang and llama.cpp's server stream `reasoning_content`; newer vLLM and Ollama `reasoning`."""
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=9, reasoning_field=field).wait_ready()
    upstream = Upstream(url=engine.base_url, upstream_model="sim-engine")
    hotloop = start_server(tmp_path, models=["think"], default_model="think", upstreams={"think": upstream})
    try:
        with hotloop.http() as http:
            events = parse_sse(http.post("/responses", json={"input": "hi", "stream": True, "store": False}).text)
    finally:
        hotloop.stop()
        engine.stop()
    check_sequence(events)
    response = events[-1]["response"]
    assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
    assert response["output"][0]["content"][0]["text"].startswith("Let me think:")
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 9
    # One delta per engine read: the 9 tokens' chunks that arrive together are one event (issue 22).
    deltas = [event["delta"] for event in events if event["type"] == RAW[0]]
    assert 1 <= len(deltas) <= 9 and "".join(deltas) == response["output"][0]["content"][0]["text"]


def test_the_chains_reasoning_reaches_the_engine_on_the_next_turn(tmp_path: Path) -> None:
    """A reasoning tool loop through `openai-chat` over WebSocket: the engine reads turn 1's thinking back with
    turn 2 (the chain in progress), and no longer once a new user message starts another chain."""
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=6, tool_calls=1).wait_ready()
    upstream = Upstream(url=engine.base_url, upstream_model="sim-engine")
    hotloop = start_server(tmp_path, models=["think"], default_model="think", upstreams={"think": upstream})
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    try:
        with WS(hotloop.ws_url) as ws:
            first = final(ws.turn(input=user("Weather?"), tools=[weather], store=False))
            thought = first["output"][0]["content"][0]["text"]
            call = first["output"][1]
            output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
            second = final(ws.turn(input=[output], previous_response_id=first["id"], tools=[weather], store=False))
            assert [item["type"] for item in second["output"]] == ["reasoning", "message"]
            third = final(ws.turn(input=user("Thanks."), previous_response_id=second["id"], tools=[weather]))
            assert third["status"] == "completed"
        records = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    finally:
        hotloop.stop()
        engine.stop()
    sent = [record["reasoning_chars"] for record in records]
    assert sent == [0, len(thought), 0], sent


def test_sealed_reasoning_round_trips_for_a_stateless_client(tmp_path: Path) -> None:
    """`store: false` with `include: ["reasoning.encrypted_content"]`: the reasoning item comes back sealed; a client
    that keeps only the sealed form (no `content`) hands it back and the engine reads the thinking again; a
    tampered blob is a 400 and nothing is stored."""
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=7, tool_calls=1).wait_ready()
    upstream = Upstream(url=engine.base_url, upstream_model="sim-engine")
    hotloop = start_server(tmp_path, models=["think"], default_model="think", upstreams={"think": upstream})
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    include = ["reasoning.encrypted_content"]
    try:
        with hotloop.http() as http:
            first = http.post(
                "/responses", json={"input": "Weather?", "tools": [weather], "store": False, "include": include}
            ).json()
            reasoning, call = first["output"]
            assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
            sealed_only = {
                "type": "reasoning",
                "id": reasoning["id"],
                "summary": [],
                "encrypted_content": reasoning["encrypted_content"],
            }
            output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
            history = [{"role": "user", "content": "Weather?"}, sealed_only, call, output]
            second = http.post("/responses", json={"input": history, "tools": [weather], "store": False})
            assert second.status_code == 200, second.text
            before = stored_counts(hotloop)
            tampered = {**sealed_only, "encrypted_content": reasoning["encrypted_content"][:-4] + "AAAA"}
            bad = http.post("/responses", json={"input": [history[0], tampered, call, output], "tools": [weather]})
            error_of(bad, 400, "invalid_encrypted_content", "input")
            assert stored_counts(hotloop) == before
        records = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    finally:
        hotloop.stop()
        engine.stop()
    thought = reasoning["content"][0]["text"]
    assert [record["reasoning_chars"] for record in records] == [0, len(thought)]


@pytest.mark.parametrize("knob", ["reasoning_effort", "enable_thinking", "think"])
def test_effort_none_turns_the_engines_thinking_off(tmp_path: Path, knob: str) -> None:
    """`reasoning.effort` reaches the engine's own knob (vLLM/gpt-oss `reasoning_effort`, Qwen3's
    `chat_template_kwargs.enable_thinking`, Ollama's `think`): `none` turns the thinking off, another effort not."""
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=4).wait_ready()
    upstream = Upstream(url=engine.base_url, upstream_model="sim-engine", reasoning_effort=knob)  # type: ignore[arg-type]
    hotloop = start_server(tmp_path, models=["think"], default_model="think", upstreams={"think": upstream})
    try:
        with hotloop.http() as http:
            off = http.post("/responses", json={"input": "hi", "store": False, "reasoning": {"effort": "none"}}).json()
            low = http.post("/responses", json={"input": "hi", "store": False, "reasoning": {"effort": "low"}}).json()
            default = http.post("/responses", json={"input": "hi", "store": False}).json()
    finally:
        hotloop.stop()
        engine.stop()
    assert [item["type"] for item in off["output"]] == ["message"]
    assert off["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    assert [item["type"] for item in low["output"]] == ["reasoning", "message"]
    assert [item["type"] for item in default["output"]] == ["reasoning", "message"]
