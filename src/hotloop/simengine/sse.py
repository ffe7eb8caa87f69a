"""Deltas as OpenAI's chat-completion and completion objects: stream chunks (SSE) and whole responses."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any, Protocol

import msgspec

from hotloop.backends.base import Delta, Finished, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallStart
from hotloop.backends.sim.backend import SimFault
from hotloop.ids import new_id
from hotloop.simengine.writers import TextWriter, writer

_encode = msgspec.json.encode


def usage(finished: Finished) -> dict[str, Any]:
    prompt = finished.prompt_tokens or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": finished.output_tokens,
        "total_tokens": prompt + finished.output_tokens,
        "prompt_tokens_details": {"cached_tokens": finished.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": finished.reasoning_tokens},
    }


class Output(Protocol):
    failed: bool
    done_marker: bool  # end the stream with `data: [DONE]` (llama.cpp's /completion does not)
    error_field: bytes  # the SSE field of an error chunk: `data`, or llama.cpp's `error`

    def start(self) -> dict[str, Any] | None: ...
    def chunk(self, delta: Delta) -> dict[str, Any] | None: ...
    def finish(self, finished: Finished) -> dict[str, Any]: ...
    def usage(self, finished: Finished) -> dict[str, Any]: ...
    def collector(self) -> Collector: ...


class Collector(Protocol):
    def add(self, delta: Delta) -> None: ...
    def result(self, finished: Finished) -> dict[str, Any]: ...


class _Chunks:
    """What the two OpenAI stream formats share: the envelope of each chunk, the usage-only chunk."""

    object = ""

    def __init__(self, id: str, model: str) -> None:
        self.id, self.model, self.created = id, model, int(time.time())
        self.failed = False
        self.done_marker = True
        self.error_field = b"data"

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model, "choices": choices}

    def usage(self, finished: Finished) -> dict[str, Any]:
        return {**self._envelope([]), "usage": usage(finished)}


class ChatChunks(_Chunks):
    """`chat.completion.chunk` objects: role first, content or `tool_calls` deltas by index, finish, usage."""

    object = "chat.completion.chunk"

    def __init__(self, id: str, model: str, reasoning_field: str = "reasoning_content") -> None:
        super().__init__(id, model)
        self.calls = 0
        self.reasoning_field = reasoning_field

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return self._envelope([choice])

    def start(self) -> dict[str, Any] | None:
        return self._chunk({"role": "assistant", "content": ""})

    def chunk(self, delta: Delta) -> dict[str, Any] | None:
        if isinstance(delta, TextDelta):
            return self._chunk({"content": delta.text})
        if isinstance(delta, ReasoningDelta):
            return self._chunk({self.reasoning_field: delta.text})
        if isinstance(delta, ToolCallStart):
            self.calls += 1
            call = {"index": self.calls - 1, "id": new_id("call"), "type": "function"}
            return self._chunk({"tool_calls": [{**call, "function": {"name": delta.name, "arguments": ""}}]})
        if isinstance(delta, ToolCallDelta):
            return self._chunk({"tool_calls": [{"index": self.calls - 1, "function": {"arguments": delta.text}}]})
        return None

    def finish(self, finished: Finished) -> dict[str, Any]:
        return self._chunk({}, _finish_reason(finished, self.calls))

    def collector(self) -> Collector:
        return _ChatCollector(self)


class _ChatCollector:
    def __init__(self, chunks: ChatChunks) -> None:
        self.chunks = chunks
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def add(self, delta: Delta) -> None:
        if isinstance(delta, TextDelta):
            self.text.append(delta.text)
        elif isinstance(delta, ReasoningDelta):
            self.reasoning.append(delta.text)
        elif isinstance(delta, ToolCallStart):
            function = {"name": delta.name, "arguments": ""}
            self.calls.append({"id": new_id("call"), "type": "function", "function": function})
        elif isinstance(delta, ToolCallDelta):
            self.calls[-1]["function"]["arguments"] += delta.text

    def result(self, finished: Finished) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) if self.text else None}
        if self.reasoning:
            message[self.chunks.reasoning_field] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": _finish_reason(finished, len(self.calls)),
        }
        envelope = self.chunks._envelope([choice])
        return {**envelope, "object": "chat.completion", "usage": usage(finished)}


class CompletionChunks(_Chunks):
    """`text_completion` objects (the legacy completions API): text per chunk (tool calls as `<tool_call>`
    blocks), finish, usage."""

    object = "text_completion"

    def __init__(self, id: str, model: str, text: TextWriter | None = None) -> None:
        super().__init__(id, model)
        self.text: list[str] = []
        self._text = text or writer("hermes")

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        return self._envelope([{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}])

    def start(self) -> dict[str, Any] | None:
        return None

    def chunk(self, delta: Delta) -> dict[str, Any] | None:
        text = self._text(delta)
        return self._choice(text, None) if text else None

    def finish(self, finished: Finished) -> dict[str, Any]:
        return self._choice("", _finish_reason(finished, 0))

    def collector(self) -> Collector:
        return self

    def add(self, delta: Delta) -> None:
        self.text.append(self._text(delta))

    def result(self, finished: Finished) -> dict[str, Any]:
        return {**self._choice("".join(self.text), _finish_reason(finished, 0)), "usage": usage(finished)}


def _finish_reason(finished: Finished, calls: int) -> str:
    if finished.reason == "length":
        return "length"
    return "tool_calls" if calls else "stop"


def _data(obj: Any) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


async def sse(output: Output, deltas: AsyncGenerator[Delta, None], include_usage: bool) -> AsyncGenerator[bytes, None]:
    """The SSE body: chunks, then usage when asked, then `[DONE]`; a fault mid-stream becomes an error chunk
    (as vLLM and llama.cpp's server send one) and the stream ends without `[DONE]`."""
    try:
        first = output.start()
        if first is not None:
            yield _data(first)
        async for delta in deltas:
            if isinstance(delta, Finished):
                yield _data(output.finish(delta))
                if include_usage:
                    yield _data(output.usage(delta))
                break
            chunk = output.chunk(delta)
            if chunk is not None:
                yield _data(chunk)
    except SimFault as exc:
        output.failed = True
        error = {"error": {"message": str(exc), "type": "server_error", "param": None, "code": "simulated_error"}}
        yield output.error_field + b": " + _encode(error) + b"\n\n"
        return
    finally:
        await deltas.aclose()
    if output.done_marker:
        yield b"data: [DONE]\n\n"
