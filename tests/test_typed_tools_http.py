"""Typed client tools end to end (protocol.md §1.4, §1.11): hotloop-sim calls `shell`, `local_shell`, `apply_patch`
or `computer` once, the client answers with the kind's output item, and the model answers in text; over HTTP JSON,
SSE and WebSocket, stored and stateless, through openai-python. Everything the server sends is validated against
openai-python's types (the Open Responses schema has none for these items and events)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseApplyPatchToolCall,
    ResponseCompletedEvent,
    ResponseComputerToolCall,
    ResponseFunctionShellToolCall,
    ResponseItem,
    ResponseOutputItemDoneEvent,
    ResponseShellCallCommandAddedEvent,
    ResponseShellCallCommandDeltaEvent,
    ResponseShellCallCommandDoneEvent,
    response_output_item,
)
from pydantic import TypeAdapter

from conftest import RunningServer, stored_counts
from media_support import png_data_url
from metrics_support import scrape
from openai_types_support import openai_typed
from websocket_sdk_support import ws_client

SIM = "hotloop-sim"
ONE_CALL = {"sim_tool_calls": "1"}  # hotloop-sim calls a tool once, then answers
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
KINDS: dict[str, tuple[dict[str, Any], str, type[Any]]] = {
    "shell": ({"type": "shell", "environment": {"type": "local"}}, "shell_call", ResponseFunctionShellToolCall),
    "local_shell": ({"type": "local_shell"}, "local_shell_call", response_output_item.LocalShellCall),
    "apply_patch": ({"type": "apply_patch"}, "apply_patch_call", ResponseApplyPatchToolCall),
    "computer": ({"type": "computer"}, "computer_call", ResponseComputerToolCall),
}


def answer(call: dict[str, Any], local_by: str = "id") -> dict[str, Any]:
    """The client's output item for a typed call (what the Agents SDK sends back after running it)."""
    call_id = call["call_id"]
    kind = call["type"]
    if kind == "shell_call":
        outcome = {"type": "exit", "exit_code": 0}
        output = [{"stdout": "hotloop-sim-1\n", "stderr": "", "outcome": outcome}]
        return {"type": "shell_call_output", "call_id": call_id, "output": output}
    if kind == "local_shell_call":
        return {"type": "local_shell_call_output", local_by: call_id, "output": json.dumps({"stdout": "ok"})}
    if kind == "apply_patch_call":
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed", "output": "Created."}
    screenshot = {"type": "computer_screenshot", "image_url": png_data_url()}
    return {"type": "computer_call_output", "call_id": call_id, "output": screenshot}


def typed(raw: dict[str, Any]) -> Response:
    """A response as the server sent it, validated by openai-python: the whole object and every output item."""
    response = Response.model_validate(raw)
    for item in raw["output"]:
        openai_typed("output", item)
    return response


def create(client: openai.OpenAI, **body: Any) -> tuple[dict[str, Any], Response]:
    raw = client.responses.with_raw_response.create(model=SIM, **body).http_response.json()
    return raw, typed(raw)


def the_call(raw: dict[str, Any], response: Response, kind: str) -> dict[str, Any]:
    """The response's one output item, the kind's call, as openai-python's class for it."""
    _, item_type, cls = KINDS[kind]
    assert raw["status"] == "completed", raw
    [item] = [item for item in raw["output"] if item["type"] != "reasoning"]
    assert item["type"] == item_type and item["status"] == "completed", item
    assert type(response.output[raw["output"].index(item)]) is cls
    assert item["call_id"].startswith("call_") and item["id"]
    return item


def answered_in_text(raw: dict[str, Any], previous: str | None) -> None:
    response = typed(raw)
    assert raw["status"] == "completed" and raw["previous_response_id"] == previous, raw
    assert raw["output"][-1]["type"] == "message" and response.output_text
    assert not [item for item in raw["output"] if item["type"].endswith("_call")]


def sse(server: RunningServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed create's events, each validated by openai-python's `ResponseStreamEvent`; numbered 0, 1, …"""
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, **body, "stream": True})
    assert reply.status_code == 200, reply.text
    return events_of(reply.text)


def events_of(text: str) -> list[dict[str, Any]]:
    blocks = [block for block in text.split("\n\n") if block.strip()]
    assert blocks[-1] == "data: [DONE]"
    events = []
    for block in blocks[:-1]:
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        openai_typed("event", event)
        events.append(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] in TERMINAL and events[0]["type"] == "response.created"
    return events


def call_events(events: list[dict[str, Any]], item_type: str) -> list[str]:
    """The types of the events about the typed call, in order, and checks they name its output index."""
    [index] = {e["output_index"] for e in events if e.get("item", {}).get("type") == item_type}
    return [e["type"] for e in events if e.get("output_index") == index]


# -- each kind: a call, then its answer -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_typed_call_then_answer_over_json(server: RunningServer, kind: str) -> None:
    client = server.client()
    tool = KINDS[kind][0]
    raw, response = create(client, input="Do the thing.", tools=[tool], metadata=ONE_CALL)
    call = the_call(raw, response, kind)
    assert raw["tools"] == [tool]  # echoed as sent
    ways = ("id", "call_id") if kind == "local_shell" else ("call_id",)
    for way in ways:  # a local_shell_call_output names its call by `id` (openai-python) or `call_id` (Agents SDK)
        follow, _ = create(
            client, previous_response_id=raw["id"], input=[answer(call, way)], tools=[tool], metadata=ONE_CALL
        )
        answered_in_text(follow, raw["id"])


@pytest.mark.parametrize("kind", list(KINDS))
def test_typed_call_then_answer_over_sse(server: RunningServer, kind: str) -> None:
    tool, item_type, _ = KINDS[kind]
    events = sse(server, {"input": "Do the thing.", "tools": [tool], "metadata": ONE_CALL})
    final = events[-1]["response"]
    call = the_call(final, typed(final), kind)
    commands = ["added", "delta", "done"] * len(call["action"]["commands"]) if kind == "shell" else []
    assert call_events(events, item_type) == [
        "response.output_item.added",
        *(f"response.shell_call_command.{step}" for step in commands),
        "response.output_item.done",
    ]
    [added] = [e for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == item_type]
    assert added["item"] == call  # sent whole, once the model had written it
    if kind == "shell":
        done = [e for e in events if e["type"] == "response.shell_call_command.done"]
        assert [e["command"] for e in done] == call["action"]["commands"]
        assert "hotloop_sim_1.txt" in call["action"]["commands"][0]  # its first call of the conversation
    body = {"previous_response_id": final["id"], "input": [answer(call)], "tools": [tool], "metadata": ONE_CALL}
    follow = sse(server, body)
    types = {event["type"] for event in follow}
    assert "response.output_text.delta" in types and not any("shell_call" in name for name in types)
    answered_in_text(follow[-1]["response"], final["id"])


def test_the_sdk_reads_a_streamed_shell_call(server: RunningServer) -> None:
    """openai-python's own stream parsing: the shell call's events come out as its typed event classes."""
    stream = server.client().responses.create(
        model=SIM, input="Run it.", tools=[{"type": "shell"}], metadata=ONE_CALL, stream=True
    )
    events = list(stream)
    classes = [type(event) for event in events]
    assert [ResponseShellCallCommandAddedEvent, ResponseShellCallCommandDeltaEvent] == classes[3:5], classes
    assert ResponseShellCallCommandDoneEvent in classes
    done = [event for event in events if isinstance(event, ResponseOutputItemDoneEvent)]
    assert [type(event.item) for event in done] == [ResponseFunctionShellToolCall]
    assert isinstance(events[-1], ResponseCompletedEvent)


# -- stateless chains -----------------------------------------------------------------------------------------------


def ws_turn(conn: Any, **body: Any) -> dict[str, Any]:
    """One create over WebSocket mode; every event validated by openai-python; the final response."""
    conn.response.create(**body)
    events: list[dict[str, Any]] = []
    while True:
        data = conn.recv_bytes()
        event = json.loads(data)
        assert event["type"] != "error", event
        openai_typed("event", event)
        conn.parse_event(data)  # and the SDK reads it
        events.append(event)
        if event["type"] in TERMINAL:
            break
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    final: dict[str, Any] = events[-1]["response"]
    return final


def test_stateless_chain_over_websocket(server: RunningServer) -> None:
    client = ws_client(server)
    before = stored_counts(server)
    with client.responses.connect() as conn:
        for kind, (tool, _, _) in KINDS.items():
            first = ws_turn(conn, model=SIM, input="Go.", tools=[tool], store=False, metadata=ONE_CALL)
            call = the_call(first, typed(first), kind)
            body = {"input": [answer(call)], "tools": [tool], "store": False, "metadata": ONE_CALL}
            answered_in_text(ws_turn(conn, model=SIM, previous_response_id=first["id"], **body), first["id"])
    assert stored_counts(server) == before


@pytest.mark.parametrize("kind", list(KINDS))
def test_stateless_client_resends_the_call(server: RunningServer, kind: str) -> None:
    """No previous_response_id and store false: the client sends the history back, the typed call among it."""
    client = server.client()
    tool = KINDS[kind][0]
    user = {"role": "user", "content": "Go."}
    raw, response = create(client, input=[user], tools=[tool], store=False, metadata=ONE_CALL)
    call = the_call(raw, response, kind)
    follow, _ = create(client, input=[user, call, answer(call)], tools=[tool], store=False, metadata=ONE_CALL)
    answered_in_text(follow, None)


# -- a stored chain: listed, replayed -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_stored_chain_lists_and_replays_the_typed_items(server: RunningServer, kind: str) -> None:
    tool, item_type, _ = KINDS[kind]
    live = sse(server, {"input": "Run it.", "tools": [tool], "metadata": ONE_CALL})
    first = live[-1]["response"]
    call = the_call(first, typed(first), kind)
    client = server.client()
    sent = answer(call, "call_id")
    body = {"previous_response_id": first["id"], "input": [sent], "tools": [tool], "metadata": ONE_CALL}
    follow, _ = create(client, **body)
    with server.http() as http:
        page = http.get(f"/responses/{follow['id']}/input_items", params={"order": "asc", "limit": 100})
        assert page.status_code == 200, page.text
        items = page.json()["data"]
        replay = http.get(f"/responses/{first['id']}", params={"stream": "true"})
        assert replay.status_code == 200, replay.text
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseItem)
    for item in items:
        adapter.validate_python(item)
    [listed] = [item for item in items if item["type"] == sent["type"]]
    assert {key: listed[key] for key in sent} == sent and listed["id"]
    listed_sdk = [item.type for item in client.responses.input_items.list(follow["id"], order="asc")]
    assert sent["type"] in listed_sdk
    replayed = events_of(replay.text)
    assert [event["type"] for event in replayed] == [event["type"] for event in live]
    assert [e for e in replayed if e.get("item", {}).get("type") == item_type] == [
        e for e in live if e.get("item", {}).get("type") == item_type
    ]
    assert [e for e in replayed if e["type"].startswith("response.shell_call_command")] == [
        e for e in live if e["type"].startswith("response.shell_call_command")
    ]
    assert replayed[-1]["response"]["output"] == first["output"]


# -- tool_choice ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("forced", ["shell", "apply_patch"])
def test_tool_choice_forces_a_typed_tool(server: RunningServer, forced: str) -> None:
    client = server.client()
    tools = [LOOKUP, KINDS["apply_patch"][0], KINDS["shell"][0]]
    for seed in range(4):  # unforced, hotloop-sim picks among the tools that act at random
        raw, response = create(
            client, input=f"Task {seed}.", tools=tools, tool_choice={"type": forced}, metadata=ONE_CALL
        )
        the_call(raw, response, forced)
        assert raw["tool_choice"] == {"type": forced}
    with pytest.raises(openai.BadRequestError) as info:
        create(client, input="x", tools=[LOOKUP], tool_choice={"type": forced})
    assert info.value.param == "tool_choice.type"


# -- refused requests: 400, nothing stored ---------------------------------------------------------------------------

SHELL_OUTPUT = answer({"type": "shell_call", "call_id": "call_unknown"})
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"input": [SHELL_OUTPUT], "tools": [KINDS["shell"][0]]}, "function_call_not_found", "input"),
    (
        {"input": [{"type": "apply_patch_call_output", "call_id": "call_none", "status": "completed"}]},
        "function_call_not_found",
        "input",
    ),
    ({"input": [{**SHELL_OUTPUT, "output": "not a list"}]}, "", "input[0]"),
    (
        {"input": "x", "tools": [{"type": "shell", "environment": {"type": "remote"}}]},
        "invalid_value",
        "tools[0].environment.type",
    ),
]


@pytest.mark.parametrize(("body", "code", "param"), REFUSED)
def test_bad_requests_are_refused_and_nothing_is_stored(
    server: RunningServer, body: dict[str, Any], code: str, param: str
) -> None:
    before = stored_counts(server)
    with pytest.raises(openai.BadRequestError) as info:
        server.client().responses.create(model=SIM, **body)
    error = info.value
    assert error.status_code == 400 and error.param is not None and error.param.startswith(param), error.body
    if code:
        assert error.code == code, error.body
    assert stored_counts(server) == before


def test_web_search_is_dropped_and_counted(server: RunningServer) -> None:
    client = server.client()
    tools = [{"type": "web_search"}, LOOKUP]
    before = scrape(server).value("hotloop_tools_dropped_total", type="web_search")
    raw, _ = create(client, input="Look it up.", tools=tools, metadata=ONE_CALL)
    assert [tool["type"] for tool in raw["tools"]] == ["function"]
    [call] = [item for item in raw["output"] if item["type"] == "function_call"]
    follow, _ = create(
        client,
        previous_response_id=raw["id"],
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "42"}],
        tools=tools,
        metadata=ONE_CALL,
    )
    answered_in_text(follow, raw["id"])
    assert follow["tools"] == raw["tools"]
    assert scrape(server).value("hotloop_tools_dropped_total", type="web_search") == before + 2  # counted per turn
