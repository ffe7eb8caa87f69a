"""`tool_search` and `defer_loading` with real clients and engines (protocol.md §1.11): the OpenAI Agents SDK
(openai-agents 0.24: `ToolSearchTool`, deferred `function_tool`s, a deferred `HostedMCPTool` against a real `mcp` SDK
server on loopback) on hotloop-sim, and the `tokens` upstream through a real `hotloop sim-engine`, whose prefix
cache shows that loading tools never renders the prompt again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    OpenAIResponsesModel,
    Runner,
    RunResult,
    ToolSearchTool,
    function_tool,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallOutputItem
from agents.tool import FunctionTool, Tool, tool_namespace
from openai import AsyncOpenAI
from openai.types.responses import ResponseToolSearchCall, ResponseToolSearchOutputItem
from openai.types.responses.response_output_item import McpCall

from conftest import RunningServer, start_server
from hotloop.backends.base import GenerationRequest
from hotloop.backends.sim.words import WORDS
from hotloop.config import Upstream
from mcp_support import McpServers
from simengine_support import SimEngineProcess
from test_tool_search import CLIENT_SEARCH, SEARCH, WEATHER, record_generations

set_tracing_disabled(True)  # no trace export: the SDK would otherwise try to reach api.openai.com

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def hotloop(tmp_path_factory: pytest.TempPathFactory, mcp_servers: McpServers) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("search"), models=["hotloop-sim"], mcp_allowed_urls=[mcp_servers.base + "/"]
    )
    yield running
    running.stop()


@pytest.fixture
def generations(monkeypatch: pytest.MonkeyPatch) -> list[GenerationRequest]:
    return record_generations(monkeypatch)


# -- the Agents SDK --------------------------------------------------------------------------------------------------


def office_tools(ran: list[tuple[str, JSON]]) -> list[FunctionTool]:
    @function_tool(defer_loading=True)
    def get_weather(city: str) -> str:
        """The current weather in a city.

        Args:
            city: The city.
        """
        ran.append(("get_weather", {"city": city}))
        return f"sunny in {city}"

    @function_tool(defer_loading=True)
    def send_email(to: str, body: str) -> str:
        """Send an email.

        Args:
            to: The address.
            body: The text.
        """
        ran.append(("send_email", {"to": to, "body": body}))
        return "sent"

    return [get_weather, send_email]


async def run_agent(server: RunningServer, tools: list[Tool]) -> RunResult:
    client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    try:
        model = OpenAIResponsesModel(model="hotloop-sim", openai_client=client)
        agent: Agent[Any] = Agent(name="searcher", instructions="Find the tools, use them.", model=model, tools=tools)
        return await Runner.run(agent, "What is the weather in Oslo?", max_turns=6)
    finally:
        await client.close()


def check_searched(result: RunResult, loaded: set[str]) -> list[Any]:
    """The first response searched (server) and loaded `loaded`; the run ended with text. Returns its output."""
    first = result.raw_responses[0].output
    assert isinstance(first[0], ResponseToolSearchCall) and first[0].execution == "server"
    assert isinstance(first[1], ResponseToolSearchOutputItem) and first[1].call_id == first[0].call_id
    # Top-level tools as declared, a namespace's members inside its namespace block (openai-python's shapes).
    names = {tool.name for tool in first[1].tools if tool.type == "function"}
    names |= {member.name for tool in first[1].tools if tool.type == "namespace" for member in tool.tools}
    assert names == loaded
    assert isinstance(result.new_items[-1], MessageOutputItem)
    assert isinstance(result.final_output, str) and result.final_output.strip()
    return first


async def test_agents_sdk_searches_and_runs_a_deferred_namespaced_tool(
    hotloop: RunningServer, generations: list[GenerationRequest]
) -> None:
    ran: list[tuple[str, JSON]] = []
    tools = tool_namespace(name="office", description="Office tools.", tools=office_tools(ran))
    result = await run_agent(hotloop, [*tools, ToolSearchTool()])
    first = check_searched(result, {"get_weather", "send_email"})
    call = first[2]
    assert (call.type, call.namespace) == ("function_call", "office") and call.name in ("get_weather", "send_email")
    # The SDK ran the tool with the arguments hotloop-sim wrote, sent its output, and the next turn answered.
    assert ran == [(call.name, json.loads(call.arguments))]
    assert [type(item) for item in result.new_items].count(ToolCallOutputItem) == 1
    assert len(result.raw_responses) == 2
    assert [spec.name for spec in generations[0].tools] == ["tool_search"] and len(generations[0].deferred) == 2


async def test_agents_sdk_runs_a_deferred_top_level_function_tool(hotloop: RunningServer) -> None:
    ran: list[tuple[str, JSON]] = []
    result = await run_agent(hotloop, [*office_tools(ran), ToolSearchTool()])
    check_searched(result, {"get_weather", "send_email"})
    assert len(ran) == 1


async def test_agents_sdk_deferred_hosted_mcp_server(
    hotloop: RunningServer, mcp_server: McpServers, generations: list[GenerationRequest]
) -> None:
    config = {
        "type": "mcp",
        "server_label": "tools",
        "server_url": mcp_server.url("/mcp"),
        "allowed_tools": ["echo", "add"],
        "require_approval": "never",
        "defer_loading": True,
    }
    result = await run_agent(hotloop, [HostedMCPTool(tool_config=config), ToolSearchTool()])  # type: ignore[arg-type]
    [response] = result.raw_responses  # hotloop ran the search and the MCP call inside one response
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "tool_search_call", "tool_search_output", "mcp_call", "message"], kinds
    found = response.output[2]
    assert isinstance(found, ResponseToolSearchOutputItem) and found.execution == "server"
    assert {tool.name for tool in found.tools if tool.type == "function"} == {"add", "echo"}
    call = response.output[3]
    assert isinstance(call, McpCall) and call.server_label == "tools" and call.name in ("add", "echo")
    assert call.error is None and call.output
    assert mcp_server.counts.method("tools/call") == 1
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert not any(isinstance(item, ToolCallOutputItem) for item in result.new_items)  # nothing for the SDK to run
    # Not in the first prompt: the first generation offered tool_search alone, the server's tools deferred.
    first, second = generations[:2]
    assert [spec.name for spec in first.tools] == ["tool_search"]
    assert {(spec.namespace, spec.name, spec.kind) for spec in first.deferred} == {
        ("tools", "add", "mcp"),
        ("tools", "echo", "mcp"),
    }
    assert sorted(spec.name for spec in second.tools) == ["add", "echo", "tool_search"]  # the hits
    assert list(second.prompt_tokens[: len(first.prompt_tokens)]) == list(first.prompt_tokens)


# -- the tokens upstream through sim-engine --------------------------------------------------------------------------

# sim-engine reads the tools off the prompt's `<tools>` section, so it sees `tool_search` alone, and writes a query
# of one word of its vocabulary ("loop-123"): this get_weather's description holds every such word, so the search
# finds it. The fillers' names share no word with that vocabulary.
FINDABLE: JSON = {
    **WEATHER,
    "description": "Current weather in a city: " + " ".join(sorted(set(WORDS))),
    "defer_loading": True,
}
FILLERS = [
    {"type": "function", "name": f"archive_{i}", "description": f"Archive box {i}.", "defer_loading": True}
    for i in range(20)
]
INSTRUCTIONS = "Be brief."


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    process = SimEngineProcess(tps=5000, prefill_us_per_token=1, tool_calls=1, parallel_calls=1).wait_ready()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def tokens(engine: SimEngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    upstream = Upstream(url=engine.base_url, dialect="vllm", backend="tokens", read_timeout_s=10)
    running = start_server(
        tmp_path_factory.mktemp("tokens"), models=["vllm"], default_model="vllm", upstreams={"vllm": upstream}
    )
    try:
        with running.http() as client:
            yield client
    finally:
        running.stop()


def create(http: httpx.Client, **body: Any) -> JSON:
    reply = http.post("/responses", json={"instructions": INSTRUCTIONS, **body})
    assert reply.status_code == 200, reply.text
    response: JSON = reply.json()
    assert response["status"] == "completed", response
    return response


def engine_requests(engine: SimEngineProcess) -> list[JSON]:
    requests: list[JSON] = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    return requests


def test_tokens_server_search_extends_the_prompt_in_the_engines_cache(
    tokens: httpx.Client, engine: SimEngineProcess
) -> None:
    engine.reset()
    response = create(tokens, input="Weather in Oslo?", tools=[SEARCH, FINDABLE, *FILLERS])
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["tool_search_call", "tool_search_output", "message"], response["output"]
    call = ResponseToolSearchCall.model_validate(response["output"][0])
    found = ResponseToolSearchOutputItem.model_validate(response["output"][1])
    assert call.execution == found.execution == "server" and found.call_id == call.call_id
    assert "get_weather" in [tool.name for tool in found.tools if tool.type == "function"]
    first, second = engine_requests(engine)
    # The second generation's prompt is the first one's ids, the ids the engine generated (its call), then the
    # search's output: the engine found all of the first two cached.
    assert second["cached_tokens"] >= first["prompt_tokens"] + first["output_ids"], (first, second)
    assert response["usage"]["input_tokens"] == first["prompt_tokens"] + second["prompt_tokens"]
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == second["cached_tokens"]
    # The deferred tools are not in the prompt: the same request with nothing deferred prompts as many tokens.
    engine.reset()
    create(tokens, input="Weather in Oslo?", tools=[SEARCH])
    assert engine_requests(engine)[0]["prompt_tokens"] == first["prompt_tokens"]


def test_tokens_client_search_output_extends_the_parents_prompt(tokens: httpx.Client, engine: SimEngineProcess) -> None:
    engine.reset()
    # The client's search: its own schema, whose one allowed query sim-engine writes.
    search = {
        **CLIENT_SEARCH,
        "description": "Search the deferred tools.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "enum": ["weather"]}}},
    }
    tools = [search, FINDABLE, *FILLERS]
    first = create(tokens, input="Weather in Oslo?", tools=tools)
    [call] = first["output"]
    parsed = ResponseToolSearchCall.model_validate(call)
    assert parsed.execution == "client" and parsed.call_id and parsed.arguments == {"query": "weather"}
    output = {"type": "tool_search_output", "call_id": parsed.call_id, "execution": "client", "tools": [FINDABLE]}
    second = create(tokens, previous_response_id=first["id"], input=[output], tools=tools)
    assert second["output"][-1]["type"] == "message"
    before, after = engine_requests(engine)
    assert before["prompt_tokens"] == first["usage"]["input_tokens"]
    assert after["cached_tokens"] >= before["prompt_tokens"] + before["output_ids"], (before, after)
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"]
