"""End-to-end agent loops through the real OpenAI Agents SDK (openai-agents 0.24), protocol.md §5.3.

An Agent on `hotloop-sim` with two function tools runs `Runner.run` / `Runner.run_streamed` over WebSocket mode
(`responses_websocket_session`, `OpenAIProvider(use_responses_websocket=True)`) and over HTTP
(`OpenAIResponsesModel`). hotloop-sim calls a declared tool until K function calls are in the conversation, then
answers text (docs/models.md): so the tools really run K times with schema-valid arguments and the loop takes K+1
model turns. The /metrics counter `hotloop_responses_total{transport=…}` proves which transport carried the turns.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pytest
from agents import (
    Agent,
    FunctionTool,
    ModelSettings,
    MultiProvider,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    function_tool,
    responses_websocket_session,
    set_default_openai_key,
    set_default_openai_responses_transport,
    set_tracing_disabled,
)
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.models import _openai_shared
from jsonschema import Draft202012Validator
from openai import AsyncOpenAI
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from conftest import RunningServer
from metrics_support import scrape

set_tracing_disabled(True)  # no trace export: the SDK would otherwise try to reach api.openai.com

DEFAULT_K = 2  # the server's sim_tool_calls setting (conftest keeps the default)


@dataclass
class Recorder:
    """The tools' own record of their calls: (tool name, keyword arguments) in call order."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def make_tools(recorder: Recorder) -> list[FunctionTool]:
    @function_tool
    def get_weather(city: Literal["Paris", "Tokyo", "Lima"], unit: Literal["celsius", "fahrenheit"]) -> str:
        """The current weather in a city.

        Args:
            city: The city.
            unit: The temperature unit.
        """
        recorder.calls.append(("get_weather", {"city": city, "unit": unit}))
        return f"sunny in {city}, 21 degrees {unit}"

    @function_tool
    def add_numbers(a: int, b: int, label: str) -> str:
        """Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
            label: A name for the sum.
        """
        recorder.calls.append(("add_numbers", {"a": a, "b": b, "label": label}))
        return f"{label} = {a + b}"

    return [get_weather, add_numbers]


def make_agent(
    recorder: Recorder,
    model: Any = "hotloop-sim",
    k: int | None = None,
    store: bool | None = None,
    metadata: dict[str, str] | None = None,
) -> tuple[Agent[Any], list[FunctionTool]]:
    tools = make_tools(recorder)
    if k is not None:
        metadata = {"sim_tool_calls": str(k), **(metadata or {})}
    settings = ModelSettings(metadata=metadata, store=store)
    agent: Agent[Any] = Agent(
        name="looper",
        instructions="Use the tools, then answer.",
        model=model,
        tools=list(tools),
        model_settings=settings,
    )
    return agent, tools


def ws_base(server: RunningServer) -> str:
    return server.base_url.replace("http://", "ws://", 1)


def responses_count(server: RunningServer, transport: str) -> float:
    return scrape(server).value("hotloop_responses_total", model="hotloop-sim", status="completed", transport=transport)


async def consume(result: RunResultStreaming) -> list[Any]:
    events = [event async for event in result.stream_events()]
    assert result.is_complete
    return events


def check_loop(result: RunResult | RunResultStreaming, recorder: Recorder, tools: list[FunctionTool], k: int) -> None:
    """K tool calls really ran with the model's schema-valid arguments, then a final text after K+1 turns."""
    assert len(result.raw_responses) == k + 1, [r.output for r in result.raw_responses]
    schemas = {tool.name: tool.params_json_schema for tool in tools}
    assert len(recorder.calls) == k, recorder.calls
    for name, arguments in recorder.calls:
        Draft202012Validator(schemas[name]).validate(arguments)

    calls = [item for item in result.new_items if isinstance(item, ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert len(calls) == len(outputs) == k
    for item, (name, arguments) in zip(calls, recorder.calls, strict=True):
        raw = item.raw_item
        assert isinstance(raw, ResponseFunctionToolCall), raw
        assert raw.name == name
        # The recorded keyword arguments are exactly what hotloop-sim produced (ints stay ints, enums members).
        assert json.loads(raw.arguments) == arguments
    call_ids = [cast(ResponseFunctionToolCall, item.raw_item).call_id for item in calls]
    assert [cast(dict[str, Any], item.raw_item)["call_id"] for item in outputs] == call_ids

    # Every model turn but the last is one function call; the last is a plain text message.
    for response in result.raw_responses[:-1]:
        assert [item.type for item in response.output] == ["function_call"]
    last = result.raw_responses[-1].output
    assert len(last) == 1 and isinstance(last[0], ResponseOutputMessage), last
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert result.final_output == "".join(part.text for part in last[0].content if isinstance(part, ResponseOutputText))


def check_stream(events: list[Any], k: int) -> None:
    raw_types = [event.data.type for event in events if event.type == "raw_response_event"]
    assert raw_types.count("response.created") == k + 1
    assert raw_types.count("response.completed") == k + 1
    assert raw_types.count("response.function_call_arguments.delta") >= k
    assert "response.output_text.delta" in raw_types
    item_names = [event.name for event in events if event.type == "run_item_stream_event"]
    assert item_names.count("tool_called") == k
    assert item_names.count("tool_output") == k
    assert item_names.count("message_output_created") == 1


async def run_once(
    agent: Agent[Any], run_config: RunConfig | None, streamed: bool, **extra: Any
) -> tuple[RunResult | RunResultStreaming, list[Any]]:
    kwargs: dict[str, Any] = {"max_turns": 10, **extra}
    if run_config is not None:
        kwargs["run_config"] = run_config
    if streamed:
        result = Runner.run_streamed(agent, "What is the weather, and what is 2 + 3?", **kwargs)
        return result, await consume(result)
    return await Runner.run(agent, "What is the weather, and what is 2 + 3?", **kwargs), []


# --- WebSocket mode --------------------------------------------------------------------------------------------


@asynccontextmanager
async def provider_config(server: RunningServer) -> AsyncIterator[RunConfig]:
    """`OpenAIProvider(use_responses_websocket=True)` on an AsyncOpenAI client pointed at hotloop."""
    client = AsyncOpenAI(base_url=server.base_url, websocket_base_url=ws_base(server), api_key="unused", max_retries=0)
    provider = OpenAIProvider(openai_client=client, use_responses=True, use_responses_websocket=True)
    try:
        yield RunConfig(model_provider=provider)
    finally:
        await provider.aclose()
        await client.close()


@asynccontextmanager
async def session_config(server: RunningServer) -> AsyncIterator[RunConfig]:
    """`agents.responses_websocket_session(...)`: one shared websocket provider for the runs inside it."""
    async with responses_websocket_session(
        api_key="unused", base_url=server.base_url, websocket_base_url=ws_base(server)
    ) as session:
        yield session.run_config


WS_SETUPS: dict[str, Callable[[RunningServer], AbstractAsyncContextManager[RunConfig]]] = {
    "provider": provider_config,
    "session": session_config,
}


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("setup", sorted(WS_SETUPS))
async def test_websocket_tool_loop(server: RunningServer, setup: str, streamed: bool) -> None:
    before_ws, before_http = responses_count(server, "websocket"), responses_count(server, "http")
    before_sse = responses_count(server, "sse")
    recorder = Recorder()
    agent, tools = make_agent(recorder)
    async with WS_SETUPS[setup](server) as run_config:
        result, events = await run_once(agent, run_config, streamed)
    check_loop(result, recorder, tools, DEFAULT_K)
    if streamed:
        check_stream(events, DEFAULT_K)
    # Every turn went over the WebSocket, none over HTTP.
    assert responses_count(server, "websocket") - before_ws == DEFAULT_K + 1
    assert responses_count(server, "http") == before_http
    assert responses_count(server, "sse") == before_sse


async def test_websocket_one_connection_for_two_runs(server: RunningServer) -> None:
    """Inside one `responses_websocket_session`, consecutive runs reuse one connection; per-request K applies."""
    before = responses_count(server, "websocket")
    k = 3
    async with responses_websocket_session(
        api_key="unused", base_url=server.base_url, websocket_base_url=ws_base(server)
    ) as session:
        for streamed in (False, True):
            recorder = Recorder()
            agent, tools = make_agent(recorder, k=k)
            if streamed:
                stream = session.run_streamed(agent, "Go.")
                check_stream(await consume(stream), k)
                check_loop(stream, recorder, tools, k)
            else:
                check_loop(await session.run(agent, "Go."), recorder, tools, k)
            assert scrape(server).value("hotloop_active_connections", transport="websocket") == 1
    assert responses_count(server, "websocket") - before == 2 * (k + 1)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("store", [True, False], ids=["stored", "unstored"])
async def test_websocket_chained_turns(server: RunningServer, store: bool, streamed: bool) -> None:
    """`auto_previous_response_id=True`: each later turn sends only its tool output with `previous_response_id`;
    with `store: false` the parent exists only in the connection's cache, so this also proves one connection."""
    before = responses_count(server, "websocket")
    recorder = Recorder()
    agent, tools = make_agent(recorder, store=store)
    sent: list[dict[str, Any]] = []
    async with session_config(server) as run_config:
        provider = run_config.model_provider
        assert isinstance(provider, MultiProvider)
        model = provider.get_model("hotloop-sim")
        original = model._prepare_websocket_request  # type: ignore[attr-defined]

        async def recording(create_kwargs: dict[str, Any]) -> Any:
            frame, url, headers = await original(create_kwargs)
            sent.append(frame)
            return frame, url, headers

        model._prepare_websocket_request = recording  # type: ignore[attr-defined]
        result, events = await run_once(agent, run_config, streamed, auto_previous_response_id=True)
    check_loop(result, recorder, tools, DEFAULT_K)
    if streamed:
        check_stream(events, DEFAULT_K)
    ids = [response.response_id for response in result.raw_responses]
    assert len(sent) == DEFAULT_K + 1
    assert "previous_response_id" not in sent[0]
    for frame, parent in zip(sent[1:], ids[:-1], strict=True):
        assert frame["type"] == "response.create" and frame["stream"] is True
        assert frame["previous_response_id"] == parent
        assert [item["type"] for item in frame["input"]] == ["function_call_output"]
        assert frame.get("store", True) is store
    assert responses_count(server, "websocket") - before == DEFAULT_K + 1
    # Stored or not, as asked.
    with server.http() as http:
        assert http.get(f"/responses/{ids[-1]}").status_code == (200 if store else 404)


async def test_websocket_global_defaults(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`set_default_openai_responses_transport("websocket")` with OPENAI_BASE_URL / OPENAI_WEBSOCKET_BASE_URL."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_WEBSOCKET_BASE_URL", ws_base(server))
    previous_transport = _openai_shared.get_default_openai_responses_transport()
    previous_key = _openai_shared.get_default_openai_key()
    before = responses_count(server, "websocket")
    set_default_openai_key("unused", use_for_tracing=False)
    set_default_openai_responses_transport("websocket")
    provider = MultiProvider()  # built after the defaults are set, as a default RunConfig would be
    try:
        recorder = Recorder()
        agent, tools = make_agent(recorder)
        result, _ = await run_once(agent, RunConfig(model_provider=provider), streamed=False)
    finally:
        await provider.aclose()
        set_default_openai_responses_transport(previous_transport)
        _openai_shared.set_default_openai_key(previous_key)  # type: ignore[arg-type]
    check_loop(result, recorder, tools, DEFAULT_K)
    assert responses_count(server, "websocket") - before == DEFAULT_K + 1


# --- HTTP ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_http_tool_loop(server: RunningServer, streamed: bool) -> None:
    transport = "sse" if streamed else "http"
    before, before_ws = responses_count(server, transport), responses_count(server, "websocket")
    client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    try:
        recorder = Recorder()
        agent, tools = make_agent(recorder, model=OpenAIResponsesModel(model="hotloop-sim", openai_client=client))
        result, events = await run_once(agent, None, streamed)
    finally:
        await client.close()
    check_loop(result, recorder, tools, DEFAULT_K)
    if streamed:
        check_stream(events, DEFAULT_K)
    assert responses_count(server, transport) - before == DEFAULT_K + 1
    assert responses_count(server, "websocket") == before_ws


@pytest.mark.parametrize(
    ("transport", "store"), [("http", True), ("http", False), ("websocket", False)], ids=["stored", "stateless", "ws"]
)
async def test_tool_loop_with_a_reasoning_model(server: RunningServer, transport: str, store: bool) -> None:
    """The sim thinks before each call and the answer: the SDK gets a typed reasoning item and the reasoning tokens
    each turn, keeps the items in its run, and runs the loop to its end, chained (stored), resending (stateless,
    its input then holds the reasoning items it got) or over a WebSocket. The tool chain's reasoning reached the
    model: the last turn's prompt counts as the conversation with its reasoning items, not without them."""
    client = AsyncOpenAI(base_url=server.base_url, websocket_base_url=ws_base(server), api_key="unused", max_retries=0)
    websocket = transport == "websocket"
    provider = OpenAIProvider(openai_client=client, use_responses=True, use_responses_websocket=websocket)
    try:
        recorder = Recorder()
        agent, tools = make_agent(recorder, model="hotloop-sim")
        agent.model_settings = ModelSettings(metadata={"sim_reasoning_tokens": "5"}, store=store)
        result, _ = await run_once(agent, RunConfig(model_provider=provider), False)
        last = result.raw_responses[-1]
        history = result.to_input_list()[: -len(last.output)]  # what the last turn read
        assert any(item.get("type") == "reasoning" for item in history)
        offered: list[Any] = [
            {"type": "function", "name": t.name, "description": t.description, "parameters": t.params_json_schema}
            for t in tools
        ]
        counts = []
        for items in (history, [item for item in history if item.get("type") != "reasoning"]):
            counted = await client.responses.input_tokens.count(
                model="hotloop-sim", input=cast(Any, items), tools=offered, instructions=agent.instructions
            )
            counts.append(counted.input_tokens)
    finally:
        await provider.aclose()
        await client.close()
    assert len(result.raw_responses) == DEFAULT_K + 1
    assert len(recorder.calls) == DEFAULT_K
    for response in result.raw_responses:
        assert type(response.output[0]).__name__ == "ResponseReasoningItem"
        assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 5
    reasoning = [item for item in result.new_items if type(item).__name__ == "ReasoningItem"]
    assert len(reasoning) == DEFAULT_K + 1
    assert last.usage is not None and last.usage.input_tokens == counts[0] > counts[1]
