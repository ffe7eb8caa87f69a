"""Shared helpers of the HTTP tests: raw SSE parsing, event-sequence checks and error-body checks."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from schema import check_event, check_response

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit", "days"],
        "additionalProperties": False,
    },
    "strict": True,
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}


def parse_sse(text: str, *, done: bool = True) -> list[dict[str, Any]]:
    """Events of an SSE body: `event:` equals the JSON type, one `data:` line each, `[DONE]` last; all validated."""
    blocks = [block for block in text.split("\n\n") if block.strip()]
    events: list[dict[str, Any]] = []
    if done:
        assert blocks[-1] == "data: [DONE]", blocks[-1]
        blocks = blocks[:-1]
    for block in blocks:
        lines = block.split("\n")
        assert len(lines) == 2, block
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        event = json.loads(lines[1][len("data: ") :])
        assert lines[0][len("event: ") :] == event["type"]
        assert "[DONE]" not in block
        check_event(event)
        events.append(event)
    return events


def stream_create(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST with `stream: true`; checks the headers and returns the validated events."""
    reply = http.post("/responses", json={**body, "stream": True})
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["cache-control"] == "no-cache"
    return parse_sse(reply.text)


# Items the server runs, whose `output_item.done` waits for it: later items may end first (protocol.md §1.10).
SERVER_RUN = frozenset({"mcp_call", "file_search_call", "code_interpreter_call"})


def check_sequence(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The lifecycle rules of protocol.md §2.2-§2.3; returns the terminal response."""
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    terminals = [event for event in events if event["type"] in TERMINAL]
    assert len(terminals) == 1 and events[-1] is terminals[0]
    # The done items by index are the output. In index order too, but for an `mcp_call` (§1.10): its done waits
    # until the server ran it, its index reserved when its arguments were done, so later items may come first.
    done = [event for event in events if event["type"] == "response.output_item.done"]
    assert sorted(event["output_index"] for event in done) == list(range(len(done)))
    by_index = {event["output_index"]: event["item"] for event in done}
    final: dict[str, Any] = events[-1]["response"]
    assert final["output"] == [by_index[index] for index in range(len(done))]
    others = [event["output_index"] for event in done if event["item"]["type"] not in SERVER_RUN]
    assert others == sorted(others)
    for event in events:
        if "response" in event:
            assert event["response"]["id"] == final["id"]
            check_response(event["response"])
    # Items one at a time: each added is followed by its done before the next added; an `mcp_call` (a
    # `code_interpreter_call`) waits aside from its arguments' (its code's) done to its own done, its events naming
    # its index.
    open_index: int | None = None
    waiting: set[int] = set()
    for event in events:
        index = event.get("output_index")
        if event["type"] == "response.output_item.added" and event["item"]["type"] == "file_search_call":
            assert open_index is None  # written whole: it waits aside for the server to run it
            waiting.add(index)
        elif event["type"] == "response.output_item.added":
            assert open_index is None
            open_index = index
        elif index in waiting:
            if event["type"] == "response.output_item.done":
                waiting.remove(index)
        elif event["type"] == "response.output_item.done":
            assert open_index == index
            open_index = None
        elif event["type"] in ("response.mcp_call_arguments.done", "response.code_interpreter_call_code.done"):
            assert open_index == index
            waiting.add(index)
            open_index = None
        elif index is not None:
            assert index == open_index
    assert not waiting
    return final


def error_of(reply: httpx.Response, status: int, code: str, param: str | None) -> dict[str, Any]:
    """Assert an error reply: status, JSON, the 4-key body, code and param."""
    assert reply.status_code == status, (reply.status_code, reply.text)
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    assert error["code"] == code, error
    assert error["param"] == param, error
    return error


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "function_call"]


def sdk_json(obj: Any) -> dict[str, Any]:
    """An SDK object as the wire sent it: `exclude_unset` keeps the SDK's own None defaults (e.g. a message's
    `phase: null`, which the OR schema rejects) out of what is validated."""
    data: dict[str, Any] = obj.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return data


def usage_record(http: httpx.Client, response_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """The response's usage record, once the ledger has written it."""
    deadline = time.monotonic() + timeout
    while True:
        reply = http.get("/usage", params={"limit": 1000})
        assert reply.status_code == 200, reply.text
        for record in reply.json()["data"]:
            if record["response_id"] == response_id:
                found: dict[str, Any] = record
                return found
        assert time.monotonic() < deadline, f"no usage record for {response_id}"
        time.sleep(0.02)


FINISHED = frozenset({"completed", "incomplete", "failed", "cancelled"})


def wait_status(
    http: httpx.Client,
    response_id: str,
    statuses: set[str] | frozenset[str],
    timeout: float = 20,
    *,
    missing_ok: bool = False,
) -> dict[str, Any]:
    """Poll GET until the response has one of `statuses`; schema-checked. `missing_ok`: a 404 means "not stored
    yet" (a response in flight is stored when it ends) and polling goes on."""
    deadline = time.monotonic() + timeout
    while True:
        reply = http.get(f"/responses/{response_id}")
        if not (missing_ok and reply.status_code == 404):
            assert reply.status_code == 200, reply.text
            body: dict[str, Any] = reply.json()
            check_response(body)
            if body["status"] in statuses:
                return body
        assert time.monotonic() < deadline, (
            f"{response_id}: {reply.status_code} {reply.text[:200]}, expected {statuses}"
        )
        time.sleep(0.02)
