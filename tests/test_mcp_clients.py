"""MCP tools the server runs (docs/mcp.md), driven by a real agent framework and served by every kind of backend.

- The OpenAI Agents SDK (openai-agents 0.24) with `HostedMCPTool`: the tool config goes to hotloop as is, hotloop
  lists and calls the loopback MCP server (mcp_support.py) inside the response, and the SDK reads the items:
  with `require_approval: "never"`, with approvals answered by `on_approval_request`, and with approvals and no
  callback (the SDK stops with an interruption; approved through its `RunState`, the run resumes).
- The backends: hotloop-sim, smollm2-135m (the real local model, its call forced by `tool_choice`), and both
  upstream backends in front of a real `hotloop sim-engine` (`openai-chat`: the MCP tools offered as functions
  `label__tool`; `tokens`: offered in the rendered prompt as `label.tool`, called in `<tool_call>` text).

Every byte the SDK received, and every streamed event here, is checked against the Open Responses schema and
openai-python's types; the MCP server's counts show the calls really ran there."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    set_tracing_disabled,
)
from agents.items import MCPApprovalRequestItem, MCPApprovalResponseItem, MCPListToolsItem, ToolApprovalItem
from openai import AsyncOpenAI
from openai.types.responses import Response
from openai.types.responses.response_output_item import McpCall

from conftest import RunningServer, start_server
from hotloop.config import Upstream
from http_support import parse_sse
from mcp_support import LABEL, McpServers, check_mcp_stream, mcp_tool, of_type
from schema import check_response
from simengine_support import READ_TIMEOUT_S, SimEngineProcess, agent_engine

set_tracing_disabled(True)  # no trace export: the SDK would otherwise try to reach api.openai.com

SMOLLM2 = "smollm2-135m"


# -- fixtures -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    yield from agent_engine()  # two parallel calls per response, a text answer once two calls were made


@pytest.fixture(scope="module")
def hotloop(
    tmp_path_factory: pytest.TempPathFactory, mcp_servers: McpServers, engine: SimEngineProcess
) -> Iterator[RunningServer]:
    common: dict[str, Any] = {"read_timeout_s": READ_TIMEOUT_S, "retries": 1}
    upstreams = {
        "chat": Upstream(url=engine.base_url, upstream_model="engine-model", **common),
        "tokens": Upstream(url=engine.base_url, backend="tokens", dialect="vllm", **common),
    }
    running = start_server(
        tmp_path_factory.mktemp("mcp-clients"),
        models=["hotloop-sim", SMOLLM2, *upstreams],
        upstreams=upstreams,
        mcp_allowed_urls=[mcp_servers.base + "/"],
    )
    yield running
    running.stop()


@pytest.fixture
def http(hotloop: RunningServer, engine: SimEngineProcess) -> Iterator[httpx.Client]:
    engine.reset()
    with hotloop.http() as client:
        yield client


# -- checks -------------------------------------------------------------------------------------------------------


def stream(http: httpx.Client, **body: Any) -> dict[str, Any]:
    reply = http.post("/responses", json={"stream": True, **body})
    assert reply.status_code == 200, reply.text
    return check_mcp_stream(parse_sse(reply.text))


def check_echo_calls(response: dict[str, Any], count: int) -> None:
    """`count` completed calls of the echo tool, each output what the MCP server returned for its arguments."""
    calls = of_type(response, "mcp_call")
    assert len(calls) == count, response["output"]
    for call in calls:
        assert call["status"] == "completed" and call["server_label"] == LABEL and call["name"] == "echo", call
        assert call["output"] == json.loads(call["arguments"])["text"]


# -- the Agents SDK -----------------------------------------------------------------------------------------------


class Recording(httpx.AsyncBaseTransport):
    """The SDK's HTTP transport, keeping every request body it sent and every body it received."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent: list[dict[str, Any]] = []
        self.received: list[tuple[str, bytearray]] = []  # (content type, body)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(await request.aread()))
        response = await self.inner.handle_async_request(request)
        body = bytearray()
        self.received.append((response.headers.get("content-type", ""), body))
        inner = response.stream
        assert isinstance(inner, httpx.AsyncByteStream)

        class Tee(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in inner:
                    body.extend(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await inner.aclose()

        return httpx.Response(
            response.status_code, headers=response.headers, stream=Tee(), extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    def responses(self) -> list[dict[str, Any]]:
        """Each response the SDK received, its body checked (a stream's events, or the JSON response)."""
        out = []
        for content_type, body in self.received:
            if content_type.startswith("text/event-stream"):
                out.append(check_mcp_stream(parse_sse(body.decode())))
            else:
                response = json.loads(body)
                check_response(response)
                Response.model_validate(response)
                out.append(response)
        return out


class Sdk:
    """An Agents SDK model on hotloop over HTTP, its traffic recorded."""

    def __init__(self, server: RunningServer) -> None:
        self.recording = Recording()
        self.client = AsyncOpenAI(
            base_url=server.base_url,
            api_key="test-key",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=self.recording, timeout=60),
        )
        self.model = OpenAIResponsesModel(model="hotloop-sim", openai_client=self.client)

    def agent(self, tool: HostedMCPTool, k: int = 2) -> Agent[Any]:
        return Agent(
            name="mcp-user",
            instructions="Use the tools, then answer.",
            model=self.model,
            tools=[tool],
            model_settings=ModelSettings(metadata={"sim_tool_calls": str(k)}),
        )


@pytest.fixture
async def sdk(hotloop: RunningServer) -> AsyncIterator[Sdk]:
    made = Sdk(hotloop)
    yield made
    await made.client.close()


def hosted(servers: McpServers, approval: str, **kwargs: Any) -> HostedMCPTool:
    config: Any = mcp_tool(servers, require_approval=approval)
    return HostedMCPTool(tool_config=config, **kwargs)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_agents_sdk_hosted_mcp_tool_runs_inside_one_response(
    sdk: Sdk, mcp_server: McpServers, streamed: bool
) -> None:
    agent = sdk.agent(hosted(mcp_server, "never"))
    if streamed:
        result: Any = Runner.run_streamed(agent, "Echo something, then answer.")
        names = [event.name async for event in result.stream_events() if event.type == "run_item_stream_event"]
        assert "mcp_list_tools" in names
    else:
        result = await Runner.run(agent, "Echo something, then answer.")
    # One model turn: hotloop listed the server, ran both calls (hotloop-sim calls twice) and answered.
    assert len(result.raw_responses) == 1 and len(sdk.recording.sent) == 1
    sent = sdk.recording.sent[0]
    assert sent["tools"] == [mcp_tool(mcp_server)]  # the SDK sent the tool config as it is
    [response] = sdk.recording.responses()
    assert [item["type"] for item in response["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    check_echo_calls(response, 2)
    assert mcp_server.counts.method("tools/list") == 1 and mcp_server.counts.method("tools/call") == 2
    # The SDK typed the items: the list, the calls with the server's real output, and the final text.
    assert any(isinstance(item, MCPListToolsItem) for item in result.new_items)
    outputs = [item.output for item in result.raw_responses[0].output if isinstance(item, McpCall)]
    assert outputs == [call["output"] for call in of_type(response, "mcp_call")]
    assert isinstance(result.final_output, str) and result.final_output == response["output"][-1]["content"][0]["text"]


async def test_agents_sdk_answers_approvals_with_its_callback(sdk: Sdk, mcp_server: McpServers) -> None:
    asked: list[MCPToolApprovalRequest] = []

    def approve(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request)
        return {"approve": True}

    agent = sdk.agent(hosted(mcp_server, "always", on_approval_request=approve))
    result = await Runner.run(agent, "Echo something, then answer.", max_turns=6)
    responses = sdk.recording.responses()
    # Each call asked first: the response ended with the request, the SDK's callback approved it, and the next
    # create (the SDK resends its items) carried the approval, which hotloop ran before generating again.
    assert len(asked) == 2 and mcp_server.counts.method("tools/call") == 2
    assert len(responses) == 3 and len(result.raw_responses) == 3
    for response, request, sent in zip(responses[:2], asked, sdk.recording.sent[1:], strict=True):
        assert response["output"][-1]["type"] == "mcp_approval_request"
        assert response["output"][-1]["id"] == request.data.id and request.data.name == "echo"
        answer = [item for item in sent["input"] if item.get("type") == "mcp_approval_response"][-1]
        assert answer == {"type": "mcp_approval_response", "approval_request_id": request.data.id, "approve": True}
    for response, request in zip(responses[1:], asked, strict=True):
        call = response["output"][0]
        assert call["type"] == "mcp_call" and call["approval_request_id"] == request.data.id
        check_echo_calls({"output": [call]}, 1)
        assert call["arguments"] == request.data.arguments
    assert responses[0]["output"][0]["type"] == "mcp_list_tools"
    assert [item["type"] for item in responses[-1]["output"]] == ["mcp_call", "message"]
    assert mcp_server.counts.method("tools/list") == 1  # the SDK resent the list: hotloop used it
    assert isinstance(result.final_output, str) and result.final_output
    assert sum(isinstance(item, MCPApprovalResponseItem) for item in result.new_items) == 2


async def test_agents_sdk_without_a_callback_stops_at_the_approval(sdk: Sdk, mcp_server: McpServers) -> None:
    agent = sdk.agent(hosted(mcp_server, "always"), k=1)
    result = await Runner.run(agent, "Echo something, then answer.")
    # The SDK surfaces the request as an interruption for the caller and stops: nothing was called.
    assert len(result.raw_responses) == 1 and mcp_server.counts.method("tools/call") == 0
    assert result.final_output is None
    [interruption] = result.interruptions
    assert isinstance(interruption, ToolApprovalItem) and interruption.tool_name == "echo"
    [request] = [item for item in result.new_items if isinstance(item, MCPApprovalRequestItem)]
    [response] = sdk.recording.responses()
    assert response["output"][-1]["type"] == "mcp_approval_request"
    assert response["output"][-1]["id"] == request.raw_item.id
    # Approved through the run's state, the run resumes: the approval goes to hotloop, which runs the call.
    state = result.to_state()
    state.approve(interruption)
    resumed = await Runner.run(agent, state)
    assert mcp_server.counts.method("tools/call") == 1
    answer = [item for item in sdk.recording.sent[-1]["input"] if item.get("type") == "mcp_approval_response"]
    assert answer == [{"type": "mcp_approval_response", "approval_request_id": request.raw_item.id, "approve": True}]
    last = sdk.recording.responses()[-1]
    assert [item["type"] for item in last["output"]] == ["mcp_call", "message"]
    check_echo_calls(last, 1)
    assert isinstance(resumed.final_output, str) and resumed.final_output


# -- the backends -------------------------------------------------------------------------------------------------


def test_hotloop_sim_runs_the_loop(http: httpx.Client, mcp_server: McpServers) -> None:
    response = stream(http, model="hotloop-sim", input="Echo twice.", tools=[mcp_tool(mcp_server)])
    assert [item["type"] for item in response["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    check_echo_calls(response, 2)
    assert mcp_server.counts.method("tools/call") == 2


def test_an_approved_call_counts_once(http: httpx.Client, mcp_server: McpServers) -> None:
    """The call an approval runs is its request's: the model's context holds one call, not two. hotloop-sim (K = 2)
    so calls again after the approved call, where counting it twice made it answer."""
    tools = [mcp_tool(mcp_server, require_approval="always")]
    asked = stream(http, model="hotloop-sim", input="Echo.", tools=tools)
    request = asked["output"][-1]
    assert request["type"] == "mcp_approval_request"
    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    approved = stream(http, model="hotloop-sim", input=[answer], tools=tools, previous_response_id=asked["id"])
    assert [item["type"] for item in approved["output"]] == ["mcp_call", "mcp_approval_request"]
    assert approved["output"][0]["approval_request_id"] == request["id"]
    check_echo_calls(approved, 1)


def test_max_output_tokens_bounds_the_whole_response(http: httpx.Client, mcp_server: McpServers) -> None:
    """`max_output_tokens` is the response's bound, not each generation's: the answer after the calls gets what
    the calls left of it, and the response ends `incomplete` at the bound."""
    tools = [mcp_tool(mcp_server)]
    free = stream(http, model="hotloop-sim", input="Echo twice.", tools=tools)
    calls_tokens = free["usage"]["output_tokens"] - 32  # hotloop-sim's answer is 32 tokens
    assert 0 < calls_tokens < 16
    cut = stream(http, model="hotloop-sim", input="Echo twice.", tools=tools, max_output_tokens=16)
    assert [item["type"] for item in cut["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    check_echo_calls(cut, 2)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["usage"]["output_tokens"] == 16


@pytest.mark.parametrize("model", ["chat", "tokens"])
def test_an_upstream_engine_runs_the_loop(
    http: httpx.Client, engine: SimEngineProcess, mcp_server: McpServers, model: str
) -> None:
    """The engine's tool policy calls an offered tool (two in parallel) until two calls are in the conversation:
    it saw the MCP tool offered (chat: function `tools__echo`; tokens: `tools.echo` in the prompt), its calls came
    back as MCP calls, and the second generation read them with the server's outputs."""
    response = stream(http, model=model, input="Echo twice.", instructions="Be brief.", tools=[mcp_tool(mcp_server)])
    assert [item["type"] for item in response["output"]] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    check_echo_calls(response, 2)
    assert mcp_server.counts.method("tools/call") == 2
    stats = engine.stats()
    assert stats["requests"] == 2  # two generations in one response
    usage = response["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    # The second prompt extends the first: the engine found the first one cached.
    assert usage["input_tokens_details"]["cached_tokens"] > 0


def test_smollm2_calls_the_forced_tool_and_generates_again(http: httpx.Client, mcp_server: McpServers) -> None:
    """The real model, its first step forced to the MCP tool by `tool_choice` (a grammar in llama.cpp): the call
    runs on the MCP server, and the model generates again on the extended prompt, with `tool_choice` back to
    auto. What it writes then is the model's choice: an answer, or another call (then the output limit ends it)."""
    response = stream(
        http,
        model=SMOLLM2,
        input="Echo the word hello.",
        tools=[mcp_tool(mcp_server)],
        tool_choice={"type": "mcp", "server_label": LABEL, "name": "echo"},
        max_output_tokens=32,
        max_tool_calls=2,
        temperature=0,
    )
    assert response["output"][0]["type"] == "mcp_list_tools"
    first = response["output"][1]
    assert first["type"] == "mcp_call" and first["name"] == "echo" and first["status"] == "completed", first
    assert first["output"] == json.loads(first["arguments"])["text"]
    run = [call for call in of_type(response, "mcp_call") if call["status"] != "incomplete"]  # not one cut short
    assert mcp_server.counts.method("tools/call") == len(run) >= 1
    # A further generation after the call (its output after the call's item), within the response's bound.
    assert len(response["output"]) > 2, response["output"]
    usage = response["usage"]
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= 32, usage
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"} and usage["output_tokens"] == 32
    else:
        assert response["status"] == "completed" and response["output"][-1]["type"] == "message"
