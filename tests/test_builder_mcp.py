"""The builder's MCP events (wire/mcp_builder.py, protocol.md §1.10): calls the server runs, approval requests and
tool listings, each event as openai-python 3.57 types it and valid for the Open Responses schema around it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import McpCall, McpListedTool, McpListTools
from hotloop.wire.replay import replay_events
from hotloop.wire.response import ErrorInfo, Response, Usage
from http_support import check_sequence
from openai_types_support import checked

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

ARGS = ('{"q": ', '"mcp"}')
PROTOCOL_ERROR = {"type": "mcp_protocol_error", "code": -32001, "message": "Request timed out"}


def new_builder() -> ResponseBuilder:
    return ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"))


def write_call(builder: ResponseBuilder, name: str = "search", label: str = "docs") -> list[Event]:
    """The model writing a call of an MCP tool, as the backend's deltas reach the builder."""
    events = builder.tool_call_start(name, "mcp", label)
    for piece in ARGS:
        events += builder.tool_call_delta(piece)
    return events + builder.tool_call_end()


def check_stream(raw: list[dict[str, Any]]) -> list[Any]:
    """The invariants of every stream (§2.2, §2.3): gapless numbers, each `output_item.done` carrying the item at
    its index of the terminal output, the done items by index being that output, every item event's index right."""
    assert [event["sequence_number"] for event in raw] == list(range(len(raw)))
    output = raw[-1]["response"]["output"]
    done = {event["output_index"]: event["item"] for event in raw if event["type"] == "response.output_item.done"}
    assert [done[index] for index in sorted(done)] == output
    index_of = {item["id"]: index for index, item in enumerate(output)}
    for event in raw:
        if "item_id" in event:
            assert event["output_index"] == index_of[event["item_id"]], event
        if "item" in event:
            assert event["output_index"] == index_of[event["item"]["id"]], event
    assert not any(item["type"] == "mcp_call" and item["status"] == "in_progress" for item in output)
    if raw[0]["type"] == "response.created":
        check_sequence(raw)  # what the server tests check of every stream
    return output


def types(raw: list[dict[str, Any]]) -> list[str]:
    return [event["type"].removeprefix("response.") for event in raw]


def test_a_call_streams_then_runs_then_is_done() -> None:
    builder = new_builder()
    events = [builder.created(), builder.in_progress(), *write_call(builder)]
    assert builder.mcp_pending() == [0]
    events.append(builder.mcp_call_running(0))
    events += builder.mcp_call_finished(0, "three hits", None)
    assert builder.mcp_pending() == []
    events += builder.text_delta("Found it.")
    events += builder.finish("completed", Usage.of(10, 0, 4))
    raw = checked(events)
    assert types(raw) == [
        "created",
        "in_progress",
        "output_item.added",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "mcp_call.in_progress",
        "mcp_call.completed",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    added = raw[2]["item"]
    assert added == {
        "type": "mcp_call",
        "id": added["id"],
        "server_label": "docs",
        "name": "search",
        "arguments": "",
        "status": "in_progress",
    }
    assert added["id"].startswith("mcp_")
    assert [raw[3]["delta"], raw[4]["delta"]] == list(ARGS)
    assert raw[5]["arguments"] == "".join(ARGS)
    output = check_stream(raw)
    assert output[0] == {**added, "arguments": '{"q": "mcp"}', "output": "three hits", "status": "completed"}
    assert output[1]["type"] == "message"


def test_a_failed_call_carries_its_error() -> None:
    builder = new_builder()
    events = [builder.created(), *write_call(builder)]
    events.append(builder.mcp_call_running(0))
    events += builder.mcp_call_finished(0, None, PROTOCOL_ERROR)
    events += builder.finish("completed", Usage.of(10, 0, 4))
    raw = checked(events)
    assert types(raw)[-4:] == ["mcp_call.in_progress", "mcp_call.failed", "output_item.done", "completed"]
    (item,) = check_stream(raw)
    assert item["status"] == "failed" and item["error"] == PROTOCOL_ERROR and "output" not in item


def test_execution_and_http_errors_are_typed_by_the_sdk() -> None:
    builder = new_builder()
    events = [builder.created(), *write_call(builder), *write_call(builder)]
    execution = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "no such page"}]}
    events += builder.mcp_call_finished(0, None, execution)
    events += builder.mcp_call_finished(1, None, {"type": "http_error", "code": 502, "message": "Bad Gateway"})
    raw = checked([*events, *builder.finish("completed", None)])
    output = check_stream(raw)
    assert [item["error"]["type"] for item in output] == ["mcp_tool_execution_error", "http_error"]


def test_parallel_calls_keep_the_indexes_reserved_for_them() -> None:
    """A message, two MCP calls and a function call in one turn; the calls run after it, in another order: every
    event names its item's index, and what follows them comes after all of them."""
    builder = new_builder()
    events = [builder.created(), *builder.text_delta("Looking.")]
    events += write_call(builder) + write_call(builder, "fetch")
    events += builder.tool_call_start("get_weather", "function", None)
    events += builder.tool_call_delta('{"city": "Oslo"}') + builder.tool_call_end()
    assert builder.mcp_pending() == [1, 2]
    for index in (2, 1):
        events.append(builder.mcp_call_running(index))
        events += builder.mcp_call_finished(index, f"result {index}", None)
    events += builder.text_delta("Done.")
    events += builder.finish("completed", Usage.of(10, 0, 8))
    raw = checked(events)
    output = check_stream(raw)
    assert [item["type"] for item in output] == ["message", "mcp_call", "mcp_call", "function_call", "message"]
    assert [output[1]["output"], output[2]["output"]] == ["result 1", "result 2"]
    assert [output[1]["name"], output[2]["name"]] == ["search", "fetch"]
    finished = [event["output_index"] for event in raw if event["type"] == "response.mcp_call.completed"]
    assert finished == [2, 1]
    added = [event["output_index"] for event in raw if event["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3, 4]
    # The function call ended while the calls before it had not run: its done waited for theirs (output order).
    done = [event["output_index"] for event in raw if event["type"] == "response.output_item.done"]
    assert done == [0, 1, 2, 3, 4]


def test_a_tool_that_needs_approval_is_one_request_item() -> None:
    builder = new_builder()
    builder.needs_approval = frozenset({("docs", "delete")})
    events = [builder.created()]
    events += builder.tool_call_start("delete", "mcp", "docs")
    assert events[1:] == []
    events += builder.tool_call_delta('{"page": ') + builder.tool_call_delta("3}")
    events += builder.tool_call_end()
    events += write_call(builder)  # another tool of the same server runs without asking
    events += builder.finish("completed", Usage.of(10, 0, 8))
    raw = checked(events)
    assert types(raw)[:3] == ["created", "output_item.added", "output_item.done"]
    request = raw[2]["item"]
    assert raw[1]["item"] == request
    assert request == {
        "type": "mcp_approval_request",
        "id": request["id"],
        "server_label": "docs",
        "name": "delete",
        "arguments": '{"page": 3}',
    }
    assert request["id"].startswith("mcpr_")
    assert not any(event["type"].startswith("response.mcp_") and event.get("item_id") == request["id"] for event in raw)
    output = check_stream(raw)  # the unrun call ends incomplete (a response the lead's loop never ran it in)
    assert [item["type"] for item in output] == ["mcp_approval_request", "mcp_call"]


def test_an_approved_call_is_added_whole_then_runs() -> None:
    builder = new_builder()
    approved = McpCall(
        id="mcp_approved",
        server_label="docs",
        name="delete",
        arguments='{"page": 3}',
        approval_request_id="mcpr_1",
    )
    events = [builder.created(), *builder.mcp_call_added(approved)]
    assert builder.mcp_pending() == [0]
    events.append(builder.mcp_call_running(0))
    events += builder.mcp_call_finished(0, "deleted", None)
    events += builder.text_delta("Deleted.") + builder.finish("completed", Usage.of(10, 0, 2))
    raw = checked(events)
    assert types(raw)[1:6] == [
        "output_item.added",
        "mcp_call_arguments.done",
        "mcp_call.in_progress",
        "mcp_call.completed",
        "output_item.done",
    ]
    assert raw[1]["item"]["arguments"] == '{"page": 3}' and raw[1]["item"]["status"] == "in_progress"
    assert raw[1]["item"]["approval_request_id"] == "mcpr_1"
    output = check_stream(raw)
    assert output[0] == {**raw[1]["item"], "output": "deleted", "status": "completed"}


@pytest.mark.parametrize("error", [None, "Error retrieving tool list from MCP server: 'docs'"])
def test_a_tool_listing(error: str | None) -> None:
    builder = new_builder()
    tools = [
        McpListedTool(name="search", input_schema={"type": "object"}, description="Search."),
        McpListedTool(name="delete", input_schema={"type": "object"}, annotations={"destructiveHint": True}),
    ]
    listing = McpListTools(id="mcpl_1", server_label="docs", tools=[] if error else tools, error=error)
    events = [builder.created(), builder.in_progress(), *builder.mcp_list_tools(listing)]
    events += builder.text_delta("Hi.") + builder.finish("completed", Usage.of(10, 0, 1))
    raw = checked(events)
    end = "failed" if error else "completed"
    assert types(raw)[2:6] == [
        "output_item.added",
        "mcp_list_tools.in_progress",
        f"mcp_list_tools.{end}",
        "output_item.done",
    ]
    assert raw[2]["item"] == {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []}
    output = check_stream(raw)
    assert output[0] == json.loads(msgspec.json.encode(listing))


@pytest.mark.parametrize("status", ["incomplete", "failed", "cancelled"])
def test_an_end_leaves_no_call_in_progress(status: str) -> None:
    """Calls written but never run end `incomplete`, each with its `output_item.done`."""
    builder = new_builder()
    events = [builder.created(), *write_call(builder), *write_call(builder, "fetch")]
    events.append(builder.mcp_call_running(0))
    events += builder.mcp_call_finished(0, "ok", None)
    error = ErrorInfo(code="server_error", message="boom") if status == "failed" else None
    reason = "max_output_tokens" if status == "incomplete" else None
    events += builder.finish(status, None, reason=reason, error=error)
    raw = checked(events)
    output = check_stream(raw)
    assert [item["status"] for item in output] == ["completed", "incomplete"]
    assert types(raw)[-2] == "output_item.done" and raw[-2]["output_index"] == 1


def test_a_call_cut_off_while_written() -> None:
    """`max_output_tokens` stops the model inside a call's arguments: the call ends `incomplete` and never runs;
    an approval request cut off is not sent at all (it has no status to say its arguments are partial)."""
    builder = new_builder()
    events = [builder.created(), *builder.tool_call_start("search", "mcp", "docs"), *builder.tool_call_delta('{"q"')]
    events += builder.finish("incomplete", Usage.of(10, 0, 16), reason="max_output_tokens")
    raw = checked(events)
    assert types(raw)[-3:] == ["mcp_call_arguments.done", "output_item.done", "incomplete"]
    (item,) = check_stream(raw)
    assert item["status"] == "incomplete" and item["arguments"] == '{"q"'
    assert builder.mcp_pending() == []

    asking = new_builder()
    asking.needs_approval = frozenset({("docs", "search")})
    events = [asking.created(), *asking.tool_call_start("search", "mcp", "docs"), *asking.tool_call_delta('{"q"')]
    events += asking.finish("incomplete", Usage.of(10, 0, 16), reason="max_output_tokens")
    raw = checked(events)
    assert types(raw) == ["created", "incomplete"] and raw[-1]["response"]["output"] == []


def test_only_a_pending_call_can_run() -> None:
    builder = new_builder()
    write_call(builder)
    builder.mcp_call_finished(0, "ok", None)
    builder.text_delta("x")
    for index in (0, 1, 5):
        with pytest.raises(ValueError):
            builder.mcp_call_running(index)
        with pytest.raises(ValueError):
            builder.mcp_call_finished(index, "again", None)


def without_deltas(raw: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(event["type"], event.get("output_index")) for event in raw if not event["type"].endswith(".delta")]


def test_a_stored_response_replays_its_mcp_items_as_they_streamed() -> None:
    response = Response(id="resp_x", created_at=1, model="hotloop-sim")
    builder = ResponseBuilder(response)
    listing = McpListTools(
        id="mcpl_1", server_label="docs", tools=[McpListedTool(name="search", input_schema={"type": "object"})]
    )
    live = [builder.created(), builder.in_progress(), *builder.mcp_list_tools(listing), *write_call(builder)]
    live += [builder.mcp_call_running(1), *builder.mcp_call_finished(1, "hits", None)]
    live += write_call(builder)
    live += [builder.mcp_call_running(2), *builder.mcp_call_finished(2, None, PROTOCOL_ERROR)]
    approved = McpCall(id="mcp_ok", server_label="docs", name="delete", arguments="{}", approval_request_id="mcpr_1")
    live += builder.mcp_call_added(approved)
    live += [builder.mcp_call_running(3), *builder.mcp_call_finished(3, "deleted", None)]
    builder.needs_approval = frozenset({("docs", "delete")})
    live += builder.tool_call_start("delete", "mcp", "docs") + builder.tool_call_delta("{}") + builder.tool_call_end()
    live += write_call(builder)  # never runs: incomplete at the end
    live += builder.finish("completed", Usage.of(10, 0, 8))
    stored = msgspec.json.decode(msgspec.json.encode(response), type=Response)
    assert stored == response

    expected, replayed = checked(live), checked(replay_events(stored))
    check_stream(replayed)
    assert replayed[-1]["response"] == expected[-1]["response"]
    # The same events in the same order (each item's came together live too), one delta per call's arguments.
    assert without_deltas(replayed) == without_deltas(expected)
    assert deltas(replayed) == deltas(expected)


def deltas(raw: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for event in raw:
        if event["type"] == "response.mcp_call_arguments.delta":
            out[event["item_id"]] = out.get(event["item_id"], "") + event["delta"]
    return out
