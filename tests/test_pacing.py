"""Per delta, not per token (issue 22): what arrives together costs one decode, one event and one frame, and a fast
model's deltas share writes.

- An engine's read that brings several chunks is decoded at once and its text (or call arguments) is one delta;
  a failing chunk fails the stream only after the output of the chunks before it, so a turn that has started is
  never retried.
- The flush window (transports/pacing.py): a delta that follows the last written delta by less than the window
  waits for the window's end; the first delta after a quiet interval and every other event leave at once, taking
  the waiting deltas along. Checked on the SSE response with a scripted event source, by what each write carries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from hotloop.backends.base import (
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    coalesced,
)
from hotloop.backends.toolcalls.streaming import make_parser
from hotloop.backends.upstream.chat import _StreamReader
from hotloop.backends.upstream.client import Retryable
from hotloop.backends.upstream.tokens import _LlamaCppReader, _VLLMReader
from hotloop.chat.specs import ToolSpec
from hotloop.transports.pacing import FlushWindow
from hotloop.transports.sse import EventStreamResponse
from hotloop.wire.events import Event

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


def _text(piece: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}).encode()


def test_adjacent_pieces_of_one_kind_become_one_delta() -> None:
    deltas = [
        ReasoningDelta("a"),
        ReasoningDelta("b"),
        TextDelta("c"),
        TextDelta("d"),
        ToolCallStart("f"),
        ToolCallDelta('{"x"'),
        ToolCallDelta(": 1}"),
        ToolCallEnd(),
        ToolCallStart("g"),
        ToolCallEnd(),
    ]
    assert coalesced(deltas) == [
        ReasoningDelta("ab"),
        TextDelta("cd"),
        ToolCallStart("f"),
        ToolCallDelta('{"x": 1}'),
        ToolCallEnd(),
        ToolCallStart("g"),
        ToolCallEnd(),
    ]
    assert coalesced([TextDelta("x")]) == [TextDelta("x")]


def test_a_chat_read_of_several_chunks_is_one_delta() -> None:
    reader = _StreamReader({})
    assert reader.feed([_text("Hel"), _text("lo"), _text(", world")]) == [TextDelta("Hello, world")]
    assert reader.started and reader.failure is None
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    more = {"index": 0, "function": {"arguments": ": 2}"}}
    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [part]}}]} for part in (call, more)]
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}
    payloads = [json.dumps(chunk).encode() for chunk in [*chunks, last, usage]]
    assert reader.feed(payloads) == [ToolCallStart("f"), ToolCallDelta('{"a": 2}')]
    finished = reader.end()
    assert finished[0] == ToolCallEnd() and isinstance(finished[-1], Finished)
    assert finished[-1].output_tokens == 5 and finished[-1].prompt_tokens == 9


def test_an_error_chunk_fails_the_stream_after_the_text_before_it() -> None:
    reader = _StreamReader({})
    error = json.dumps({"error": {"message": "out of memory", "code": 500}}).encode()
    assert reader.feed([_text("a"), _text("b"), error, _text("never")]) == [TextDelta("ab")]
    assert reader.started  # output went out: the failure is not retried
    assert isinstance(reader.failure, Retryable) and "out of memory" in str(reader.failure)


def test_a_chunk_that_is_not_json_is_named_after_the_text_before_it() -> None:
    reader = _StreamReader({})
    assert reader.feed([_text("a"), b'{"choices": [', _text("never")]) == [TextDelta("a")]
    assert reader.failure is not None and "unreadable chunk" in str(reader.failure)
    assert '{"choices": [' in str(reader.failure)


def test_a_tokens_read_goes_through_the_tool_parser_once() -> None:
    """vLLM's completions: the read's texts joined, one parser step; a call split across chunks comes out whole."""
    reader = _VLLMReader(make_parser("hermes", [ToolSpec("get_weather")], True), 3)
    pieces = [
        "Let me ",
        "check.",
        "<tool_call>",
        '{"name": "get_weather", ',
        '"arguments": {"city": "Oslo"}}',
        "</tool_call>",
    ]
    payloads = [
        json.dumps({"choices": [{"index": 0, "text": piece, "finish_reason": None}]}).encode() for piece in pieces
    ]
    deltas = reader.feed(payloads)
    assert deltas[0] == TextDelta("Let me check.")
    assert ToolCallStart("get_weather") in deltas
    arguments = "".join(delta.text for delta in deltas if isinstance(delta, ToolCallDelta))
    assert json.loads(arguments) == {"city": "Oslo"}
    assert sum(isinstance(delta, ToolCallDelta) for delta in deltas) == 1


def test_a_tokens_read_ignores_what_follows_llamacpps_last_chunk() -> None:
    reader = _LlamaCppReader(make_parser("none", [], True), 3)
    stop = {"content": "!", "stop": True, "tokens_predicted": 2, "timings": {"cache_n": 1}}
    payloads = [json.dumps(chunk).encode() for chunk in ({"content": "hi"}, stop, {"content": "late"})]
    assert reader.feed(payloads) == [TextDelta("hi!")]
    assert reader.done and reader.pieces == 2
    [finished] = reader.end()
    assert isinstance(finished, Finished) and finished.output_tokens == 2 and finished.cached_tokens == 1


def test_the_window_moves_on_with_each_write_that_carried_a_delta() -> None:
    window = FlushWindow(0.005)
    assert window.delay(100.0) == 0.0  # nothing written yet: at once
    window.wrote(100.0)
    assert window.delay(100.002) == pytest.approx(0.003)
    assert window.delay(100.005) == 0.0
    assert FlushWindow(-1.0).interval == 0.0  # a negative setting is no window


# -- the SSE response under a window, by what each write carries ------------------------------------------------------


def _event(kind: str, seq: int) -> Event:
    data = json.dumps({"type": kind, "sequence_number": seq}).encode()
    return Event(kind, data, kind == "response.completed")


DELTA = "response.output_text.delta"


async def _script(steps: list[str | float]) -> AsyncGenerator[Event, None]:
    """Events of the kinds named, with a sleep (seconds) where a number stands: later loop iterations."""
    seq = 0
    for step in steps:
        if isinstance(step, float):
            await asyncio.sleep(step)
            continue
        yield _event(step, seq)
        seq += 1


async def _writes(steps: list[str | float], window_s: float) -> list[list[int]]:
    """The sequence numbers each body write carried, [DONE] left out."""
    response = EventStreamResponse(_script(steps), done=True, flush_window_s=window_s)
    writes: list[list[int]] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message["body"]:
            blocks = [block for block in message["body"].decode().split("\n\n") if block.startswith("event:")]
            writes.append([json.loads(block.split("\ndata: ")[1])["sequence_number"] for block in blocks])

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    await response({"type": "http"}, receive, send)
    return [write for write in writes if write]


async def test_deltas_wait_for_the_window_and_leave_with_the_next_event() -> None:
    """A long window: the first delta leaves at once; the next ones wait and leave with the event that follows."""
    steps: list[str | float] = ["response.created", 0.001, DELTA, 0.001, DELTA, 0.001, DELTA, 0.001]
    steps += ["response.output_text.done", "response.completed"]
    assert await _writes(steps, window_s=10.0) == [[0], [1], [2, 3, 4, 5]]


async def test_waiting_deltas_leave_at_the_windows_end_without_another_event() -> None:
    """Deltas 1 and 2 wait for the window's end (40 ms after delta 0's write), not for delta 3 at 150 ms."""
    steps: list[str | float] = [DELTA, 0.001, DELTA, 0.001, DELTA, 0.15, DELTA, "response.completed"]
    assert await _writes(steps, window_s=0.04) == [[0], [1, 2], [3, 4]]


async def test_no_window_writes_every_iteration() -> None:
    steps: list[str | float] = [DELTA, 0.001, DELTA, 0.001, DELTA, "response.completed"]
    assert await _writes(steps, window_s=0.0) == [[0], [1], [2, 3]]
