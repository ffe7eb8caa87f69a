"""hotloop-sim, driven directly (no sockets) and once through the server (docs/models.md)."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx
import jsonschema
import pytest

from conftest import RunningServer
from hotloop.backends.base import (
    Delta,
    Finished,
    GenerationRequest,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.backends.sim.backend import SimBackend, SimSettings
from hotloop.backends.sim.schema_example import example_for_schema
from hotloop.chat.specs import ToolSpec
from schema import check_response

FAST = SimSettings(ttft_ms=0.0, tps=1_000_000.0)

SCHEMAS: dict[str, dict[str, Any]] = {
    "flat": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 2, "maxLength": 8},
                    "address": {
                        "type": "object",
                        "properties": {
                            "zip": {"type": "string"},
                            "geo": {"type": "array", "items": {"type": "number"}},
                        },
                        "required": ["zip", "geo"],
                    },
                },
                "required": ["name", "address"],
            }
        },
        "required": ["user"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                },
            },
        },
        "required": ["tags", "matrix", "points"],
    },
    "enums": {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "level": {"enum": [1, 2, 3]},
            "mode": {"const": "fast"},
            "flag": {"type": "boolean"},
            "maybe": {"type": ["string", "null"]},
        },
        "required": ["unit", "level", "mode", "flag", "maybe"],
    },
    "numbers": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 10, "maximum": 12},
            "negative": {"type": "integer", "maximum": -5},
            "exclusive": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
            "ratio": {"type": "number", "minimum": 0.5, "maximum": 0.75},
            "temperature": {"type": "number", "minimum": -40},
        },
        "required": ["count", "negative", "exclusive", "ratio", "temperature"],
    },
    "refs": {
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {"sku": {"type": "string", "format": "uuid"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            }
        },
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "when": {"type": "string", "format": "date-time"},
            "choice": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ]
            },
        },
        "required": ["items", "when", "choice", "merged"],
    },
    "empty": {"type": "object", "properties": {}},
}


def tool(name: str, schema: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(name=name, parameters=schema if schema is not None else SCHEMAS["flat"])


def request(prompt: list[int] | None = None, **fields: Any) -> GenerationRequest:
    return GenerationRequest(prompt_tokens=prompt if prompt is not None else list(range(1, 40)), **fields)


async def collect(backend: SimBackend, req: GenerationRequest) -> list[Delta]:
    return [delta async for delta in backend.generate(req)]


def text_of(deltas: list[Delta]) -> str:
    return "".join(delta.text for delta in deltas if isinstance(delta, TextDelta))


def calls_of(deltas: list[Delta]) -> list[tuple[str, str]]:
    """(name, payload) of each call; also checks Start/Delta/End framing."""
    calls: list[tuple[str, str]] = []
    current: tuple[str, list[str]] | None = None
    for delta in deltas:
        if isinstance(delta, ToolCallStart):
            assert current is None
            current = (delta.name, [])
        elif isinstance(delta, ToolCallDelta):
            assert current is not None
            current[1].append(delta.text)
        elif isinstance(delta, ToolCallEnd):
            assert current is not None
            calls.append((current[0], "".join(current[1])))
            current = None
    assert current is None
    return calls


def finished(deltas: list[Delta]) -> Finished:
    assert isinstance(deltas[-1], Finished)
    assert sum(isinstance(delta, Finished) for delta in deltas) == 1
    return deltas[-1]


# -- determinism ----------------------------------------------------------------------------------------------------


async def test_same_seed_same_prompt_same_output() -> None:
    prompt = [random.Random(1).randrange(50_000) for _ in range(64)]
    first = await collect(SimBackend(FAST), request(prompt))
    second = await collect(SimBackend(FAST), request(prompt))
    assert first[:-1] == second[:-1] and text_of(first)
    assert finished(first).output_tokens == finished(second).output_tokens == FAST.output_tokens
    with_tools = request(prompt, tools=[tool("a"), tool("b"), tool("c")])
    assert await collect(SimBackend(FAST), with_tools) == await collect(SimBackend(FAST), with_tools)


async def test_different_seed_or_prompt_changes_output() -> None:
    prompt = list(range(100, 164))
    base = text_of(await collect(SimBackend(FAST), request(prompt)))
    other_seed = SimSettings(ttft_ms=0.0, tps=1_000_000.0, seed=7)
    assert text_of(await collect(SimBackend(other_seed), request(prompt))) != base
    assert text_of(await collect(SimBackend(FAST), request([*prompt, 1]))) != base


# -- tool policy ----------------------------------------------------------------------------------------------------


async def test_k_calls_then_text_from_settings() -> None:
    backend = SimBackend(SimSettings(ttft_ms=0.0, tps=1_000_000.0, tool_calls=3))
    tools = [tool("get_weather")]
    for so_far in range(3):
        deltas = await collect(backend, request(tools=tools, calls_so_far=so_far))
        assert [name for name, _ in calls_of(deltas)] == ["get_weather"] and not text_of(deltas)
    deltas = await collect(backend, request(tools=tools, calls_so_far=3))
    assert calls_of(deltas) == [] and text_of(deltas)


async def test_k_from_metadata_overrides_settings() -> None:
    backend = SimBackend(FAST)  # K = 2 by default
    tools = [tool("get_weather")]
    assert calls_of(await collect(backend, request(tools=tools, calls_so_far=4, metadata={"sim_tool_calls": "5"})))
    assert not calls_of(await collect(backend, request(tools=tools, calls_so_far=1, metadata={"sim_tool_calls": "1"})))
    assert not calls_of(await collect(backend, request(tools=tools, metadata={"sim_tool_calls": "0"})))
    # Unusable overrides fall back to the setting.
    for bad in ("many", "inf", "nan", "-1"):
        assert calls_of(await collect(backend, request(tools=tools, metadata={"sim_tool_calls": bad})))


async def test_tool_choice_none_required_and_forced() -> None:
    backend = SimBackend(FAST)
    tools = [tool("a"), tool("b"), tool("c")]
    deltas = await collect(backend, request(tools=tools, tool_choice="none"))
    assert not calls_of(deltas) and text_of(deltas)
    deltas = await collect(backend, request(tools=[], tool_choice="auto"))
    assert not calls_of(deltas) and text_of(deltas)
    # required: a call even after K calls
    deltas = await collect(backend, request(tools=tools, tool_choice="required", calls_so_far=10))
    assert len(calls_of(deltas)) == 1 and not text_of(deltas)
    for prompt_seed in range(5):
        prompt = [prompt_seed, *range(20)]
        forced = request(prompt, tools=tools, tool_choice="required", forced_tool="b", calls_so_far=10)
        assert [name for name, _ in calls_of(await collect(backend, forced))] == ["b"]


async def test_parallel_calls_setting() -> None:
    backend = SimBackend(SimSettings(ttft_ms=0.0, tps=1_000_000.0, parallel_calls=3))
    tools = [tool("a"), tool("b")]
    assert len(calls_of(await collect(backend, request(tools=tools, parallel_tool_calls=True)))) == 3
    assert len(calls_of(await collect(backend, request(tools=tools, parallel_tool_calls=False)))) == 1
    forced = request(tools=tools, parallel_tool_calls=True, tool_choice="required", forced_tool="a")
    assert [name for name, _ in calls_of(await collect(backend, forced))] == ["a", "a", "a"]


async def test_custom_tool_gets_freeform_input() -> None:
    deltas = await collect(SimBackend(FAST), request(tools=[ToolSpec(name="apply_patch", kind="custom")]))
    starts = [delta for delta in deltas if isinstance(delta, ToolCallStart)]
    assert starts and starts[0].kind == "custom"
    assert calls_of(deltas)[0][1]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
async def test_arguments_are_valid_against_the_tool_schema(name: str) -> None:
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    backend = SimBackend(FAST)
    for prompt_seed in range(25):
        prompt = [prompt_seed * 7919 + i for i in range(30)]
        deltas = await collect(backend, request(prompt, tools=[tool(name, schema)]))
        [(called, payload)] = calls_of(deltas)
        assert called == name
        jsonschema.validate(json.loads(payload), schema, cls=jsonschema.Draft202012Validator)


def test_example_for_schema_many_seeds() -> None:
    for schema in SCHEMAS.values():
        for seed in range(60):
            value = example_for_schema(schema, random.Random(seed))
            jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("name", ["flat", "nested", "enums", "refs"])
async def test_json_schema_text_format(name: str) -> None:
    schema = SCHEMAS[name]
    fmt = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    deltas = await collect(SimBackend(FAST), request(text_format=fmt))
    assert not calls_of(deltas)
    jsonschema.validate(json.loads(text_of(deltas)), schema, cls=jsonschema.Draft202012Validator)
    assert finished(deltas).reason == "stop"


async def test_json_object_text_format() -> None:
    deltas = await collect(SimBackend(FAST), request(text_format={"type": "json_object"}))
    assert isinstance(json.loads(text_of(deltas)), dict)


# -- length, pacing, overrides ----------------------------------------------------------------------------------


async def test_max_output_tokens_finishes_with_length() -> None:
    backend = SimBackend(FAST)
    deltas = await collect(backend, request(max_output_tokens=5, metadata={"sim_output_tokens": "50"}))
    end = finished(deltas)
    assert end.reason == "length" and end.output_tokens == 5
    assert sum(isinstance(delta, TextDelta) for delta in deltas) == 5
    # A tool call cut short also ends with "length".
    deltas = await collect(backend, request(tools=[tool("n", SCHEMAS["nested"])], max_output_tokens=3))
    assert finished(deltas).reason == "length" and finished(deltas).output_tokens == 3
    # Within the limit: "stop".
    deltas = await collect(backend, request(max_output_tokens=100, metadata={"sim_output_tokens": "10"}))
    assert finished(deltas).reason == "stop" and finished(deltas).output_tokens == 10


async def test_output_tokens_override() -> None:
    for count in (1, 2, 7):
        deltas = await collect(SimBackend(FAST), request(metadata={"sim_output_tokens": str(count)}))
        assert finished(deltas).output_tokens == count
        assert sum(isinstance(delta, TextDelta) for delta in deltas) == count
        assert text_of(deltas).endswith(".")


async def test_pacing_lower_bounds() -> None:
    backend = SimBackend(SimSettings(ttft_ms=0.0, tps=500.0))
    start = time.perf_counter()
    deltas = await collect(backend, request(metadata={"sim_output_tokens": "50"}))
    assert finished(deltas).output_tokens == 50
    assert time.perf_counter() - start >= 0.09  # 49 inter-token gaps at 2 ms

    slow_start = SimBackend(SimSettings(ttft_ms=150.0, tps=1_000_000.0))
    start = time.perf_counter()
    stream = slow_start.generate(request())
    first = await stream.__anext__()
    assert isinstance(first, TextDelta)
    assert time.perf_counter() - start >= 0.14
    await stream.aclose()

    # metadata overrides both
    start = time.perf_counter()
    await collect(
        SimBackend(FAST), request(metadata={"sim_ttft_ms": "100", "sim_tps": "1000", "sim_output_tokens": "51"})
    )
    assert time.perf_counter() - start >= 0.14  # 100 ms + 50 gaps at 1 ms


async def test_the_model_clock_starts_when_the_request_arrives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's own bookkeeping (here a prefix-cache lookup made slow on purpose) is part of its time to
    first token, as an engine's is, not added to it: hotloop's overhead in `bench agent-loop` is measured against
    that clock."""
    from hotloop.backends.sim import backend as sim

    real_prefix = SimBackend._cached_prefix

    def slow_prefix(self: SimBackend, packed: bytes) -> int:
        time.sleep(0.08)
        return real_prefix(self, packed)

    monkeypatch.setattr(sim.SimBackend, "_cached_prefix", slow_prefix)
    stream = SimBackend(SimSettings(ttft_ms=150.0, tps=1_000_000.0)).generate(request())
    start = time.perf_counter()
    first = await stream.__anext__()
    took = time.perf_counter() - start
    await stream.aclose()
    assert isinstance(first, TextDelta)
    assert 0.14 <= took < 0.2  # 150 ms, not 150 + 80


# -- simulated prefix cache -----------------------------------------------------------------------------------------


async def test_prefix_cache_reports_shared_prefix() -> None:
    backend = SimBackend(FAST)
    first = list(range(1000, 1100))
    assert finished(await collect(backend, request(first))).cached_tokens == 0
    second = first[:60] + list(range(5000, 5040))
    assert finished(await collect(backend, request(second))).cached_tokens == 60
    # A continuation extends the whole earlier prompt.
    third = [*first, 7, 8, 9]
    assert finished(await collect(backend, request(third))).cached_tokens == len(first)
    # The same prompt again is entirely cached; an unrelated one is not.
    assert finished(await collect(backend, request(third))).cached_tokens == len(third)
    assert finished(await collect(backend, request([9, 9, 9]))).cached_tokens == 0


async def test_prefill_warms_the_cache() -> None:
    backend = SimBackend(FAST)
    prompt = list(range(300))
    assert await backend.prefill(prompt) == 0
    assert await backend.prefill(prompt) == len(prompt)
    deltas = await collect(backend, request([*prompt, 1, 2]))
    assert finished(deltas).cached_tokens == len(prompt)


# -- through the server ---------------------------------------------------------------------------------------------


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": SCHEMAS["flat"],
}


def test_sim_tool_loop_through_the_server(server: RunningServer) -> None:
    """K=2 calls (default settings), then text; continuations report the parent's prompt as cached."""
    with httpx.Client(base_url=server.base_url, headers={"Authorization": "Bearer k"}, timeout=30) as http:
        body: dict[str, Any] = {
            "model": "hotloop-sim",
            "input": "What is the weather in Paris?",
            "tools": [WEATHER_TOOL],
        }
        previous: dict[str, Any] | None = None
        kinds: list[str] = []
        for _turn in range(3):
            reply = http.post("/responses", json=body)
            assert reply.status_code == 200, reply.text
            response = reply.json()
            check_response(response)
            assert response["status"] == "completed"
            usage = response["usage"]
            if previous is not None:
                assert 0 < usage["input_tokens_details"]["cached_tokens"] <= usage["input_tokens"]
                assert usage["input_tokens"] > previous["usage"]["input_tokens"]
            output = response["output"]
            kinds.append(output[-1]["type"])
            calls = [item for item in output if item["type"] == "function_call"]
            for call in calls:
                assert call["name"] == "get_weather"
                jsonschema.validate(json.loads(call["arguments"]), SCHEMAS["flat"])
            body = {
                "model": "hotloop-sim",
                "previous_response_id": response["id"],
                "tools": [WEATHER_TOOL],
                "input": [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in calls],
            }
            previous = response
        assert kinds == ["function_call", "function_call", "message"]
