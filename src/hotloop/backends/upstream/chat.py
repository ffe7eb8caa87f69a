"""`openai-chat`: a served model that another engine runs, through its /v1/chat/completions (docs/backends.md).

Streams with `stream_options.include_usage` so prompt and cached tokens come from the engine. The HTTP side
(pooled client, replicas, retries before the first token, error mapping) is `client.UpstreamBackend`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from hotloop.backends.base import (
    BackendError,
    Delta,
    Finished,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    coalesced,
)
from hotloop.backends.toolcalls.arguments import StringStream
from hotloop.backends.upstream import chat_messages as chat
from hotloop.backends.upstream.chat_json import MessagesJSON
from hotloop.backends.upstream.client import Retryable, UpstreamBackend, decoded, engine_ms, mid_stream_error
from hotloop.chat.specs import ToolSpec
from hotloop.config import Upstream


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _CallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None
    # The model's reasoning, by engine: vLLM and SGLang (`reasoning_content`, newer vLLM `reasoning`), llama.cpp's
    # server and LM Studio (`reasoning_content`), Ollama (`reasoning`; `thinking` in its own API's shape).
    reasoning_content: str | None = None
    reasoning: str | None = None
    thinking: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None  # vLLM sends null in the usage-only chunk
    usage: _Usage | None = None
    error: Any = None
    timings: Any = None  # llama.cpp's server: its own prompt and generation times


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_chunks = msgspec.json.Decoder(list[_Chunk]).decode


class OpenAIChatBackend(UpstreamBackend):
    """A `Backend` that takes messages (`Model.takes_messages`): `GenerationRequest.items`, not tokens."""

    path = "/chat/completions"

    def __init__(self, name: str, upstream: Upstream) -> None:
        super().__init__(name, upstream)
        replay = chat.Replay(policy=upstream.reasoning_replay, field=upstream.reasoning_field)
        self.conversations = MessagesJSON(replay=replay)  # a continuation converts and encodes only its new items

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.conversations.encode(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = chat.tools(request.tools)
            body["tool_choice"] = chat.tool_choice(request)
            if not request.parallel_tool_calls:
                body["parallel_tool_calls"] = False
        if request.max_output_tokens is not None:
            body[self.upstream.max_tokens_param] = request.max_output_tokens
        # Only what differs from the API's defaults: an engine's own defaults (Ollama's temperature) otherwise hold.
        for key, value, default in (
            ("temperature", request.temperature, 1.0),
            ("top_p", request.top_p, 1.0),
            ("presence_penalty", request.presence_penalty, 0.0),
            ("frequency_penalty", request.frequency_penalty, 0.0),
        ):
            if value != default:
                body[key] = value
        body.update(_effort(self.upstream.reasoning_effort, request.reasoning_effort))
        fmt = chat.response_format(request.text_format)
        if fmt is not None:
            body["response_format"] = fmt
        return body

    def reader(self, request: GenerationRequest) -> _StreamReader:
        return _StreamReader(chat.tool_by_wire_name(request.tools))

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        """`generate: false` costs the engine nothing: chat APIs have no prefill-only request."""
        return 0


class _StreamReader:
    """Chat-completion chunks → hotloop deltas: text, tool calls opened and closed in index order, the finish."""

    def __init__(self, specs: dict[str, ToolSpec]) -> None:
        self.specs = specs
        self.started = False  # a delta has been yielded: no retry from here on
        self.done = False  # the stream ends with `[DONE]`
        self.open: int | None = None  # index of the tool call being streamed
        self.open_custom: list[str] | None = None  # a custom tool's JSON arguments, unwrapped at its end
        self.seen: set[int] = set()
        self.reason: Literal["stop", "length"] | None = None
        self.usage: _Usage | None = None
        self.engine_ms: float | None = None
        self.pieces = 0
        self.failure: Exception | None = None

    def feed(self, payloads: Sequence[bytes]) -> list[Delta]:
        out: list[Delta] = []
        try:
            for chunk in decoded(payloads, _decode_chunk, _decode_chunks):
                out += self._chunk(chunk)
        except (BackendError, Retryable) as exc:
            self.failure = exc
        if out:
            self.started = True
            self.pieces += len(out)
        return coalesced(out)

    def _chunk(self, chunk: _Chunk) -> list[Delta]:
        if chunk.error is not None:
            raise mid_stream_error(msgspec.json.encode({"error": chunk.error}))
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.timings is not None:
            self.engine_ms = engine_ms(chunk.timings)
        out: list[Delta] = []
        for choice in chunk.choices or ():
            if choice.delta is not None:
                out += self._delta(choice.delta)
            if choice.finish_reason is not None:
                self.reason = "length" if choice.finish_reason == "length" else "stop"
        return out

    def _delta(self, delta: _Delta) -> list[Delta]:
        out: list[Delta] = []
        reasoning = delta.reasoning_content or delta.reasoning or delta.thinking
        if reasoning:
            out += self._close()
            out.append(ReasoningDelta(reasoning))
        if delta.content:
            out += self._close()
            out.append(TextDelta(delta.content))
        for call in delta.tool_calls or ():
            if call.index != self.open:
                if call.index in self.seen:
                    raise BackendError("The upstream engine interleaved the arguments of parallel tool calls.")
                out += self._close()
                out.append(self._start(call))
            arguments = call.function.arguments if call.function is not None else None
            if arguments:
                if self.open_custom is not None:
                    self.open_custom.append(arguments)
                else:
                    out.append(ToolCallDelta(arguments))
        return out

    def _start(self, call: _CallDelta) -> ToolCallStart:
        self.open = call.index
        self.seen.add(call.index)
        name = (call.function.name if call.function is not None else None) or ""
        spec = self.specs.get(name)
        if spec is None:
            self.open_custom = None
            return ToolCallStart(name=name)
        self.open_custom = [] if spec.freeform else None
        return ToolCallStart(name=spec.name, kind=spec.kind, namespace=spec.namespace)

    def _close(self, cut: bool = False) -> list[Delta]:
        """The open call's end; `cut`: the length limit stopped the stream inside it (it ends incomplete)."""
        if self.open is None:
            return []
        out: list[Delta] = []
        if self.open_custom is not None:
            out.append(ToolCallDelta(_custom_input("".join(self.open_custom))))
        self.open, self.open_custom = None, None
        out.append(ToolCallEnd(incomplete=cut))
        return out

    def end(self) -> Sequence[Delta]:
        """The deltas after the stream's last chunk: the open call's end and `Finished` with the engine's usage."""
        if self.reason is None:
            raise Retryable(BackendError("The upstream engine ended its stream without a finish reason."))
        usage = self.usage
        details = usage.prompt_tokens_details if usage is not None else None
        completion = usage.completion_tokens_details if usage is not None else None
        finished = Finished(
            reason=self.reason,
            output_tokens=usage.completion_tokens if usage is not None else self.pieces,
            cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            engine_ms=self.engine_ms,
            reasoning_tokens=(completion.reasoning_tokens or 0) if completion is not None else 0,
        )
        return [*self._close(cut=self.reason == "length"), finished]


_INPUT = re.compile(r'\s*\{\s*"input"\s*:\s*(?=")')


def _effort(knob: str, effort: str | None) -> dict[str, Any]:
    """`reasoning.effort` as the engine's own knob (docs/backends.md); nothing when the request sets none."""
    if effort is None or knob == "off":
        return {}
    if knob == "enable_thinking":
        return {"chat_template_kwargs": {"enable_thinking": effort != "none"}}
    if knob == "think":
        return {"think": effort != "none"}
    return {"reasoning_effort": effort}


def _custom_input(arguments: str) -> str:
    """A custom tool's text from the `{"input": …}` arguments it was offered with (raw text when not that); of
    arguments cut short, the input as far as it was written."""
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        started = _INPUT.match(arguments)
        return StringStream().take(arguments[started.end() :])[0] if started is not None else arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return value["input"]
    return arguments
