"""`tool_search` and `defer_loading` end to end on hotloop-sim (protocol.md §1.11): openai-python over HTTP, SSE and
WebSocket mode; server and client execution; what the prompt holds; bad search outputs.

hotloop-sim's first call in a conversation whose tools are deferred is a search for the words of the first two
deferred tools' names (`get_weather` first here: "get weather tool 0"); later calls pick among the callable tools.
The `generations` fixture records what hotloop asked of hotloop-sim: the tools offered, the tools still deferred and
the prompt's token ids, which show that a server-run search extends the prompt instead of rendering it again.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import openai
import pytest
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseToolSearchCall,
    ResponseToolSearchOutputItem,
)

from conftest import RunningServer, stored_counts
from hotloop.backends.base import GenerationRequest
from hotloop.backends.sim.backend import SimBackend
from hotloop.pipeline.steps.searches import Searches
from hotloop.pipeline.tools import resolve_tools
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.response import Response
from hotloop.wire.tool_items import ToolSearchCall
from http_support import check_sequence, error_of, stream_create
from openai_types_support import openai_typed
from websocket_sdk_support import run_turn, ws_client

JSON = dict[str, Any]
SEARCH: JSON = {"type": "tool_search"}
CLIENT_SEARCH: JSON = {"type": "tool_search", "execution": "client"}
WEATHER: JSON = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FILLER: list[JSON] = [
    {
        "type": "function",
        "name": f"tool_{i}",
        "description": f"Does thing number {i} to a record.",
        "parameters": {"type": "object", "properties": {"record": {"type": "string"}, "force": {"type": "boolean"}}},
    }
    for i in range(200)
]
DEFERRED: list[JSON] = [{**tool, "defer_loading": True} for tool in (WEATHER, *FILLER)]  # get_weather first
NO_CALLS = {"sim_tool_calls": "0"}  # hotloop-sim answers at once: usage.input_tokens is the first prompt's size


def record_generations(monkeypatch: pytest.MonkeyPatch) -> list[GenerationRequest]:
    """Every GenerationRequest hotloop hands hotloop-sim from now on (the servers run in this process)."""
    seen: list[GenerationRequest] = []
    generate = SimBackend.generate

    def recording(self: SimBackend, request: GenerationRequest) -> Any:
        seen.append(request)
        return generate(self, request)

    monkeypatch.setattr(SimBackend, "generate", recording)
    return seen


@pytest.fixture
def generations(monkeypatch: pytest.MonkeyPatch) -> list[GenerationRequest]:
    return record_generations(monkeypatch)


def dump(item: Any) -> JSON:
    raw: JSON = item if isinstance(item, dict) else item.model_dump(mode="json", exclude_none=True)
    return raw


def check_server_search(output: list[Any]) -> list[str]:
    """tool_search_call (server, completed), its tool_search_output listing get_weather, then a call to one of the
    loaded tools; every item as openai-python types it. Returns the loaded tools' names."""
    raw = [dump(item) for item in output]
    assert [item["type"] for item in raw] == ["tool_search_call", "tool_search_output", "function_call"], raw
    for item in raw:
        openai_typed("output", item)
    call = ResponseToolSearchCall.model_validate(raw[0])
    assert call.execution == "server" and call.status == "completed" and call.call_id and call.id.startswith("ts_")
    assert call.arguments == {"query": "get weather tool 0"}
    found = ResponseToolSearchOutputItem.model_validate(raw[1])
    assert found.execution == "server" and found.status == "completed" and found.call_id == call.call_id
    loaded = [tool.name for tool in found.tools if tool.type == "function"]
    assert "get_weather" in loaded and len(loaded) <= 5, loaded
    assert all(tool["defer_loading"] is True for tool in raw[1]["tools"])
    assert raw[1]["tools"][loaded.index("get_weather")]["parameters"] == WEATHER["parameters"]  # as declared
    function = ResponseFunctionToolCall.model_validate(raw[2])
    assert function.name in loaded and function.status == "completed" and json.loads(function.arguments) is not None
    return loaded


def check_generations(generations: list[GenerationRequest], loaded: list[str]) -> None:
    """The first generation offered only tool_search (201 deferred); the second could call the hits, its prompt the
    first one's ids followed by the search's call and output (extended, not rendered again)."""
    first, second = generations
    assert [spec.name for spec in first.tools] == ["tool_search"] and len(first.deferred) == 201
    assert [spec.name for spec in second.tools] == ["tool_search", *loaded]
    assert len(second.deferred) == 201 - len(loaded)
    assert len(second.prompt_tokens) > len(first.prompt_tokens)
    assert list(second.prompt_tokens[: len(first.prompt_tokens)]) == list(first.prompt_tokens)


# -- server execution over HTTP, SSE, WebSocket ----------------------------------------------------------------------


def test_server_search_over_http(server: RunningServer, generations: list[GenerationRequest]) -> None:
    response = server.client().responses.create(
        model="hotloop-sim", input="Weather in Oslo?", tools=[SEARCH, *DEFERRED]
    )
    assert response.status == "completed"
    assert isinstance(response.output[0], ResponseToolSearchCall)
    assert isinstance(response.output[1], ResponseToolSearchOutputItem)
    loaded = check_server_search(response.output)
    check_generations(generations, loaded)
    # Both generations count: the second read the first one's prompt from hotloop-sim's prefix cache.
    assert response.usage is not None
    assert response.usage.input_tokens == sum(len(g.prompt_tokens) for g in generations)
    assert response.usage.input_tokens_details.cached_tokens >= len(generations[0].prompt_tokens)
    assert server.client().responses.retrieve(response.id).output == response.output
    # The echo keeps each deferred tool's `defer_loading`.
    assert all(tool.defer_loading for tool in response.tools if tool.type == "function")


def test_server_search_over_sse(server: RunningServer, generations: list[GenerationRequest]) -> None:
    with server.http() as http:
        events = stream_create(http, {"model": "hotloop-sim", "input": "Weather?", "tools": [SEARCH, *DEFERRED]})
    final = check_sequence(events)
    for event in events:
        openai_typed("event", event)
    loaded = check_server_search(final["output"])
    check_generations(generations, loaded)
    for index, kind in enumerate(["tool_search_call", "tool_search_output"]):
        of_item = [event for event in events if event.get("output_index") == index]
        assert [event["type"] for event in of_item] == ["response.output_item.added", "response.output_item.done"]
        assert [event["item"]["type"] for event in of_item] == [kind, kind]
        assert of_item[1]["item"] == final["output"][index]
    assert "response.function_call_arguments.delta" in [event["type"] for event in events]


def test_server_search_over_websocket(server: RunningServer, generations: list[GenerationRequest]) -> None:
    with ws_client(server).responses.connect() as conn:
        response, events = run_turn(conn, model="hotloop-sim", input="Weather?", tools=[SEARCH, *DEFERRED], store=False)
        loaded = check_server_search(response.output)
        added = [e.item for e in events if isinstance(e, ResponseOutputItemAddedEvent)]
        done = [e.item for e in events if isinstance(e, ResponseOutputItemDoneEvent)]
        assert isinstance(added[0], ResponseToolSearchCall) and isinstance(added[1], ResponseToolSearchOutputItem)
        assert done == response.output
        # The loaded tools stay callable in the continuation (store false: the connection's chain).
        call = response.output[2]
        assert isinstance(call, ResponseFunctionToolCall)
        answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        follow, _ = run_turn(
            conn,
            model="hotloop-sim",
            previous_response_id=response.id,
            input=[answer],
            tools=[SEARCH, *DEFERRED],
            store=False,
            metadata={"sim_tool_calls": "3"},
        )
    assert [item.type for item in follow.output] == ["function_call"] and follow.output[0].name in loaded  # type: ignore[union-attr]
    check_generations(generations[:2], loaded)
    assert [spec.name for spec in generations[2].tools] == ["tool_search", *loaded]
    assert list(generations[2].prompt_tokens[: len(generations[1].prompt_tokens)]) == list(generations[1].prompt_tokens)


# -- max_tool_calls ----------------------------------------------------------------------------------------------------


def searching_every_step(monkeypatch: pytest.MonkeyPatch) -> list[GenerationRequest]:
    """hotloop-sim made a model that searches at every step while the search is offered and tools are deferred
    (it searches when the context holds no call yet): recorded as `record_generations` does."""
    seen: list[GenerationRequest] = []
    generate = SimBackend.generate

    def searching(self: SimBackend, request: GenerationRequest) -> Any:
        seen.append(request)
        return generate(self, msgspec.structs.replace(request, calls_so_far=0))

    monkeypatch.setattr(SimBackend, "generate", searching)
    return seen


def test_max_tool_calls_bounds_the_servers_searches(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that would search again and again runs `max_tool_calls` searches (built-in calls, as MCP calls are);
    then the search is no longer offered, and the model calls a tool it loaded."""
    seen = searching_every_step(monkeypatch)
    response = server.client().responses.create(
        model="hotloop-sim", input="Weather?", tools=[SEARCH, *DEFERRED], max_tool_calls=2
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["tool_search_call", "tool_search_output"] * 2 + ["function_call"], kinds
    assert response.status == "completed"
    outputs = [item for item in response.output if isinstance(item, ResponseToolSearchOutputItem)]
    assert all(item.status == "completed" and item.tools for item in outputs)
    assert [spec.name for spec in seen[0].tools] == ["tool_search"]
    assert "tool_search" in [spec.name for spec in seen[1].tools]
    assert "tool_search" not in [spec.name for spec in seen[2].tools] and len(seen) == 3


async def test_a_search_past_max_tool_calls_is_not_run() -> None:
    """Two searches in one step with room for one: the second loads nothing and is answered `incomplete`."""
    deferred = resolve_tools([SEARCH, *DEFERRED], drop=()).deferred
    builder = ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"))
    for number in (1, 2):
        call = ToolSearchCall(arguments={"query": "weather"}, execution="server", call_id=f"call_{number}")
        builder.add_item(call)
    searches = Searches(deferred)
    events, ran = await searches.run(builder, room=1)
    assert ran == 1 and len(events) == 4  # added and done, for each output
    first, second = builder.response.output[2:]
    assert first.status == "completed" and "get_weather" in [tool["name"] for tool in first.tools]
    assert second.status == "incomplete" and second.tools == []
    assert [spec.name for spec in searches.fresh()] == [tool["name"] for tool in first.tools]


# -- the prompt --------------------------------------------------------------------------------------------------------


def test_deferred_tools_leave_the_prompt_as_short_as_without_them(client: openai.OpenAI) -> None:
    def prompt(tools: list[JSON]) -> int:
        response = client.responses.create(model="hotloop-sim", input="Weather?", tools=tools, metadata=NO_CALLS)
        assert response.usage is not None and response.output[0].type == "message"
        return response.usage.input_tokens

    deferred, alone, offered = prompt([SEARCH, *DEFERRED]), prompt([SEARCH]), prompt([SEARCH, WEATHER, *FILLER])
    assert deferred == alone
    assert offered > alone + 200 * 20  # every tool's definition, some 30 tokens each


# -- client execution ------------------------------------------------------------------------------------------------


def client_search(client: openai.OpenAI) -> Any:
    response = client.responses.create(model="hotloop-sim", input="Weather?", tools=[CLIENT_SEARCH, *DEFERRED])
    assert response.status == "completed" and len(response.output) == 1, response.output
    call = response.output[0]
    assert isinstance(call, ResponseToolSearchCall)
    assert (
        call.execution == "client" and call.status == "completed" and call.call_id and call.call_id.startswith("call_")
    )
    assert call.arguments == {"query": "get weather tool 0"}
    return response


def loads(call_id: str, *tools: JSON) -> JSON:
    return {
        "type": "tool_search_output",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "tools": list(tools),
    }


def test_client_search_loads_what_the_client_names(client: openai.OpenAI, generations: list[GenerationRequest]) -> None:
    first = client_search(client)
    output = loads(first.output[0].call_id, {**WEATHER, "defer_loading": True})
    openai_typed("input", output)
    second = client.responses.create(
        model="hotloop-sim", previous_response_id=first.id, input=[output], tools=[CLIENT_SEARCH, *DEFERRED]
    )
    [call] = second.output
    # A deferred top-level tool's call carries its own name as its namespace, as OpenAI's does.
    assert isinstance(call, ResponseFunctionToolCall) and call.name == call.namespace == "get_weather"
    assert json.loads(call.arguments)["city"]
    assert [spec.name for spec in generations[1].tools] == ["tool_search", "get_weather"]
    assert len(generations[1].deferred) == 200
    # The parent's prompt is the continuation's prefix: the system message was not rendered again.
    assert list(generations[1].prompt_tokens[: len(generations[0].prompt_tokens)]) == list(generations[0].prompt_tokens)
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    # The whole history resent (store false, no previous_response_id) loads the same tool.
    history = [{"role": "user", "content": "Weather?"}, dump(first.output[0]), output]
    stateless = client.responses.create(
        model="hotloop-sim", input=history, tools=[CLIENT_SEARCH, *DEFERRED], store=False
    )
    assert [(item.type, getattr(item, "name", None)) for item in stateless.output] == [("function_call", "get_weather")]


def test_a_client_search_output_of_an_undeclared_tool_is_refused(server: RunningServer) -> None:
    first = client_search(server.client())
    before = stored_counts(server)
    with server.http() as http:
        for bad in ({"type": "function", "name": "launch_rocket"}, {**WEATHER, "namespace": "elsewhere"}):
            body = {
                "model": "hotloop-sim",
                "previous_response_id": first.id,
                "input": [loads(first.output[0].call_id, bad)],
                "tools": [CLIENT_SEARCH, *DEFERRED],
            }
            error = error_of(http.post("/responses", json=body), 400, "invalid_value", "input")
            assert bad["name"] in error["message"]
            unknown = {**body, "input": [loads("call_unknown", WEATHER)]}
            error_of(http.post("/responses", json=unknown), 400, "function_call_not_found", "input")
    assert stored_counts(server) == before  # nothing stored


def test_deferred_tools_need_a_tool_search(server: RunningServer) -> None:
    before = stored_counts(server)
    with server.http() as http:
        for tools in (
            [DEFERRED[0]],
            [{"type": "namespace", "name": "ns", "description": "N.", "tools": [DEFERRED[0]]}],
        ):
            reply = http.post("/responses", json={"model": "hotloop-sim", "input": "Hi", "tools": tools})
            error_of(reply, 400, "invalid_value", "tools")
    assert stored_counts(server) == before


# -- namespaces ------------------------------------------------------------------------------------------------------


LOOKUP: JSON = {
    "type": "function",
    "name": "lookup_customer",
    "description": "Find a customer by email.",
    "parameters": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
}
ORDERS: JSON = {
    "type": "function",
    "name": "list_orders",
    "description": "A customer's orders.",
    "parameters": {"type": "object", "properties": {}},
}


def crm(*members: JSON) -> JSON:
    return {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": list(members)}


def test_a_deferred_namespace_member_is_loaded_by_search_and_called_in_its_namespace(
    client: openai.OpenAI, generations: list[GenerationRequest]
) -> None:
    def prompt(namespace: JSON) -> int:
        response = client.responses.create(
            model="hotloop-sim", input="Find Ann.", tools=[SEARCH, namespace], metadata=NO_CALLS
        )
        assert response.usage is not None
        return response.usage.input_tokens

    # Not rendered: the namespace with its deferred member prompts as the namespace without it.
    assert prompt(crm({**LOOKUP, "defer_loading": True}, ORDERS)) == prompt(crm(ORDERS)) < prompt(crm(LOOKUP, ORDERS))
    assert [(s.namespace, s.name) for s in generations[0].deferred] == [("crm", "lookup_customer")]
    assert [(s.namespace, s.name) for s in generations[0].tools] == [(None, "tool_search"), ("crm", "list_orders")]
    response = client.responses.create(
        model="hotloop-sim", input="Find Ann.", tools=[SEARCH, crm({**LOOKUP, "defer_loading": True})]
    )
    search, found, call = (dump(item) for item in response.output)
    assert search["arguments"] == {"query": "lookup customer"}
    block = ResponseToolSearchOutputItem.model_validate(found).tools[0]
    assert block.type == "namespace" and block.name == "crm" and [t.name for t in block.tools] == ["lookup_customer"]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "lookup_customer", "crm")
    assert "email" in json.loads(call["arguments"])


def test_a_client_search_output_may_list_a_namespace_as_openai_does(
    client: openai.OpenAI, generations: list[GenerationRequest]
) -> None:
    """openai-python's `tool_search_output` lists a namespace's loaded members inside the namespace."""
    tools = [CLIENT_SEARCH, crm({**LOOKUP, "defer_loading": True}, ORDERS)]
    first = client.responses.create(model="hotloop-sim", input="Find Ann.", tools=tools)
    output = loads(first.output[0].call_id, crm({**LOOKUP, "defer_loading": True}))
    openai_typed("input", output)
    second = client.responses.create(
        model="hotloop-sim",
        previous_response_id=first.id,
        input=[output],
        tools=tools,
        metadata={"sim_tool_calls": "9"},
    )
    assert second.output[0].type == "function_call" and second.output[0].namespace == "crm"
    assert [(s.namespace, s.name) for s in generations[1].tools][-1] == ("crm", "lookup_customer")
    assert generations[1].deferred == []


def test_a_server_search_with_nothing_deferred_is_answered(client: openai.OpenAI) -> None:
    """A server-run search never ends a response unanswered: with no deferred tool it finds nothing, and says so."""
    response = client.responses.create(
        model="hotloop-sim", input="Hi", tools=[SEARCH], metadata={"sim_tool_calls": "1"}
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["tool_search_call", "tool_search_output", "message"], kinds
    found = response.output[1]
    assert isinstance(found, ResponseToolSearchOutputItem) and found.tools == [] and found.status == "completed"
    assert found.call_id == response.output[0].call_id  # type: ignore[union-attr]
