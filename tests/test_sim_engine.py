"""`hotloop sim-engine` as a real process, driven with the openai SDK and httpx: chat and completions (streamed and
not), real tokenization, the prefix cache and its prefill cost, decode rate, the tool policy, errors, and the
test facilities (/stats, /sim/script)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.simengine.costs import PrefixCache, prefill_ms
from http_support import check_sequence, parse_sse
from simengine_support import SimEngineProcess

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
        },
    },
}
PREFILL_US = 400.0


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    process = SimEngineProcess(
        tps=5000, prefill_us_per_token=PREFILL_US, parallel_calls=2, tool_calls=2, model="sim-test"
    ).wait_ready()
    yield process
    process.stop()


@pytest.fixture()
def sdk(engine: SimEngineProcess) -> Iterator[openai.OpenAI]:
    engine.reset()
    client = openai.OpenAI(base_url=engine.base_url, api_key="k", max_retries=0)
    yield client
    client.close()


def test_chat_text_answer_counts_real_tokens(sdk: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    result = sdk.chat.completions.create(model="anything", messages=messages)
    choice = result.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content
    assert result.model == "anything"
    expected = len(smollm2_chat_format().tokens(messages))  # the prompt was tokenized for real
    assert result.usage is not None and result.usage.prompt_tokens == expected
    assert result.usage.completion_tokens == 32


def test_streamed_tool_calls_parallel_with_usage(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Oslo and Paris?"}],
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += call.id or ""
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
    assert finish == "tool_calls"
    assert sorted(calls) == [0, 1]  # two parallel calls, by index
    for call in calls.values():
        assert call["name"] == "get_weather" and call["id"]
        arguments = json.loads(call["arguments"])
        assert isinstance(arguments["city"], str) and 1 <= arguments["days"] <= 7
    assert usage is not None and usage.prompt_tokens > 100  # the offered tool is in the prompt
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens is not None


def test_tool_policy_answers_after_k_calls_and_is_deterministic(sdk: openai.OpenAI) -> None:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
        for i in range(2)
    ]
    messages: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c1", "content": "rainy"},
    ]
    first = sdk.chat.completions.create(model="m", messages=messages, tools=[WEATHER])
    second = sdk.chat.completions.create(model="m", messages=messages, tools=[WEATHER])
    assert first.choices[0].finish_reason == "stop"  # K = 2 calls made: a text answer
    assert first.choices[0].message.content == second.choices[0].message.content  # same input, same output
    one = sdk.chat.completions.create(
        model="m",
        messages=messages[:1],
        tools=[WEATHER],
        parallel_tool_calls=False,
    )
    assert one.choices[0].message.tool_calls is not None and len(one.choices[0].message.tool_calls) == 1


def _ttft(engine: SimEngineProcess, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Seconds to the first content chunk of a streamed chat completion, and its usage."""
    start = time.perf_counter()
    first = None
    usage: dict[str, Any] = {}
    with engine.http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    assert first is not None
    return first, usage


def test_prefill_is_charged_only_for_uncached_tokens(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    history = [{"role": "user", "content": " ".join(f"word{i}" for i in range(600))}]
    body = {"model": "m", "messages": history, "stream_options": {"include_usage": True}}
    cold, usage = _ttft(engine, body)
    prompt = usage["prompt_tokens"]
    assert prompt > 1000 and usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert cold >= prompt * PREFILL_US / 1e6 * 0.9  # ≥ 0.4 s of modelled prefill
    longer = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    warm, usage = _ttft(engine, {**body, "messages": longer})
    assert usage["prompt_tokens_details"]["cached_tokens"] >= prompt - 2  # the first prompt is a cached prefix
    assert warm < cold / 3


def test_decode_rate_and_max_tokens(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    engine.script({"tps": 200, "output_tokens": 40})
    start = time.perf_counter()
    result = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    elapsed = time.perf_counter() - start
    assert result.usage is not None and result.usage.completion_tokens == 40
    assert elapsed >= 39 / 200
    short = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 3


def test_completions_text_and_token_id_prompts(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    text = sdk.completions.create(model="m", prompt="The quick brown fox", max_tokens=5)
    assert text.choices[0].finish_reason == "length" and text.choices[0].text
    assert text.usage is not None and text.usage.prompt_tokens == len(
        smollm2_chat_format().tokenizer.encode("The quick brown fox")
    )
    ids = sdk.completions.create(model="m", prompt=[5, 6, 7, 8, 9, 10], max_tokens=4)
    assert ids.usage is not None and ids.usage.prompt_tokens == 6
    again = sdk.completions.create(
        model="m", prompt=[5, 6, 7, 8, 9, 10, 11], max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(again)
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    final = chunks[-1].usage
    assert final is not None and final.prompt_tokens == 7
    assert final.prompt_tokens_details is not None and final.prompt_tokens_details.cached_tokens == 6
    batch = engine.http.post("/v1/completions", json={"prompt": [[1, 2], [3]]})
    assert batch.status_code == 400 and batch.json()["error"]["param"] == "prompt"


def test_token_endpoints_follow_a_json_schema_like_constrained_decoding(engine: SimEngineProcess) -> None:
    params = WEATHER["function"]["parameters"]
    call = {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": params}}
    schema = {"anyOf": [call, {"type": "object", "properties": {"name": {"const": "other"}}}]}
    bodies = {
        "/v1/completions": {
            "prompt": [1, 2, 3],
            "max_tokens": 200,
            "response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}},
        },
        "/generate": {
            "input_ids": [1, 2, 3],
            "sampling_params": {"max_new_tokens": 200, "json_schema": json.dumps(schema)},
        },
        "/completion": {"prompt": [1, 2, 3], "n_predict": 200, "json_schema": schema},
    }
    for path, body in bodies.items():
        reply = engine.http.post(path, json=body).json()
        text = reply["choices"][0]["text"] if path == "/v1/completions" else reply.get("text", reply.get("content"))
        value = json.loads(text)  # nothing but the schema's JSON: no `<tool_call>` tags, no prose
        assert value["name"] == "get_weather" and isinstance(value["arguments"]["city"], str), (path, text)
    bad = engine.http.post("/generate", json={"input_ids": [1], "sampling_params": {"json_schema": "{nope"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "sampling_params.json_schema"


def test_bad_requests_are_400_with_the_param(engine: SimEngineProcess) -> None:
    malformed = engine.http.post("/v1/chat/completions", content=b"{nope")
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"
    wrong = engine.http.post("/v1/chat/completions", json={"messages": [{"role": 5}]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages[0].role"
    choice = engine.http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER], "tool_choice": "sometimes"},
    )
    assert choice.status_code == 400 and choice.json()["error"]["param"] == "tool_choice"


def test_scripted_failures_and_counters(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    engine.script({"status": 503, "message": "overloaded"})
    with pytest.raises(openai.InternalServerError) as raised:
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "overloaded" in str(raised.value)
    engine.script({"die_after": 2})
    lines = []
    with engine.http.stream(
        "POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True}
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert '"error"' in lines[-1] and "[DONE]" not in lines[-1]
    stats = engine.stats()
    assert stats["requests"] == 2 and stats["failed"] == 2 and stats["completed"] == 0


def test_a_closed_stream_counts_as_cancelled(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    engine.script({"tps": 20, "output_tokens": 500})
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    with (
        httpx.Client(base_url=engine.base_url, timeout=10) as client,
        client.stream("POST", "/chat/completions", json=body) as response,
    ):
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # a token arrived: go away mid-generation
    stats = engine.wait_stats(lambda s: s["cancelled"] == 1 and s["active"] == 0, timeout=5)
    assert stats["cancelled"] == 1 and stats["active"] == 0 and stats["completed"] == 0


def test_prefix_cache_is_an_lru_of_prompts() -> None:
    cache = PrefixCache(entries=2)
    assert cache.match([1, 2, 3]) == 0
    assert cache.match([1, 2, 3, 4]) == 3
    assert cache.match([9, 9]) == 0
    assert cache.match([1, 2, 5]) == 2  # shares two tokens with a remembered prompt
    assert len(cache) == 2  # the least recently used prompts went first
    assert cache.match([1, 2, 3, 4, 5]) == 2
    assert prefill_ms(1000, 400, 50.0) == 30.0


def test_stateless_responses_endpoint(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    events = parse_sse(
        engine.http.post("/v1/responses", json={"input": "Weather?", "tools": [tool], "stream": True}).text
    )
    first = check_sequence(events)  # the same event shapes as hotloop's, schema-checked
    made = [item for item in first["output"] if item["type"] == "function_call"]
    assert first["status"] == "completed" and first["store"] is False and len(made) == 2
    outputs = [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"} for call in made]
    history = [{"role": "user", "content": "Weather?"}, *made, *outputs]
    second = sdk.responses.create(model="m", input=history, tools=[tool])
    assert second.status == "completed" and second.output_text  # two calls in the input: K reached, text
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens > 0
    stateful = engine.http.post("/v1/responses", json={"input": "x", "previous_response_id": first["id"]})
    assert stateful.status_code == 400 and stateful.json()["error"]["param"] == "previous_response_id"


def test_request_log_times_each_generation(engine: SimEngineProcess, sdk: openai.OpenAI) -> None:
    engine.script({"tps": 100, "output_tokens": 10})  # 10 tokens at 100/s: at least 90 ms of decode
    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    engine.http.post("/v1/responses", json={"input": "Hello", "stream": True}).raise_for_status()
    engine.http.get("/v1/models").raise_for_status()  # not a generation: not logged
    first, second = engine.http.get("/stats/requests").json()["requests"]
    assert (first["seq"], first["path"], second["path"]) == (1, "/v1/chat/completions", "/v1/responses")
    assert first["ms"] >= 90.0 and first["output_tokens"] == 10 and second["output_tokens"] == 32
    assert second["prompt_tokens"] > 0 and second["ms"] > 0
    assert engine.http.get("/stats/requests", params={"after": 1}).json()["requests"] == [second]
