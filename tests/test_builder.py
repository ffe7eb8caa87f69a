"""The event builder without sockets: deltas in, protocol.md §2 event sequences out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import ErrorBody, Event
from hotloop.wire.response import ErrorInfo, Response, Usage
from schema import check_event

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


def decode(events: list[Event]) -> list[dict[str, Any]]:
    out = [json.loads(event.data) for event in events]
    for event, raw in zip(events, out, strict=True):
        assert raw["type"] == event.type
        check_event(raw)
    return out


def new_builder(stream_id: str | None = None) -> ResponseBuilder:
    return ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"), stream_id)


def test_text_then_call_sequence_and_numbers() -> None:
    builder = new_builder()
    events = [builder.created(), builder.in_progress()]
    events += builder.text_delta("Hel") + builder.text_delta("lo")
    events += (
        builder.tool_call_start("f", "function", None)
        + builder.tool_call_delta('{"a"')
        + builder.tool_call_delta(":1}")
    )
    events += builder.tool_call_end()
    events += builder.finish("completed", Usage.of(10, 4, 6))
    raw = decode(events)
    assert [event["sequence_number"] for event in raw] == list(range(len(raw)))
    assert [event["type"] for event in raw] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert raw[6]["text"] == "Hello" and raw[12]["arguments"] == '{"a":1}' and raw[12]["name"] == "f"
    final = raw[-1]["response"]
    assert final["output"] == [raw[8]["item"], raw[13]["item"]]
    assert final["usage"]["total_tokens"] == 16 and final["completed_at"] is not None
    assert all("stream_id" not in event for event in raw)


def test_incomplete_closes_open_item_as_incomplete() -> None:
    builder = new_builder("lane_1")
    events = builder.text_delta("cut") + builder.finish("incomplete", Usage.of(5, 0, 16), reason="max_output_tokens")
    raw = decode(events)
    assert raw[-2]["item"]["status"] == "incomplete"
    assert raw[-1]["type"] == "response.incomplete"
    assert raw[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert raw[-1]["response"]["completed_at"] is None
    assert all(event["stream_id"] == "lane_1" for event in raw)


def test_failure_with_inband_error() -> None:
    builder = new_builder()
    error = ErrorInfo(code="server_error", message="boom")
    body = ErrorBody(type="server_error", code="server_error", message="boom", param=None)
    raw = decode(builder.finish("failed", None, error=error, inband_error=body))
    assert [event["type"] for event in raw] == ["error", "response.failed"]
    assert raw[1]["response"]["error"] == {"code": "server_error", "message": "boom"}
