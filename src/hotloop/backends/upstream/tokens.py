"""`tokens`: an engine that takes token ids (docs/backends.md): vLLM, SGLang or llama.cpp's server.

hotloop renders and tokenizes with the model's own tokenizer and chat template, incrementally per chain, so each
turn's prompt is the previous turn's ids plus the new ones and the engine's prefix cache hits. Only ids are sent;
the generated text comes back and `toolcalls/streaming.py` turns it into text and tool-call deltas as it streams.

Dialects (the request and the streamed chunks; the URL is the server's base):
- `vllm`: POST <url>/completions (url ends in /v1), `prompt` = ids; usage with
  `prompt_tokens_details.cached_tokens` (vLLM's `--enable-prompt-tokens-details`).
- `sglang`: POST <url>/generate, `input_ids`; cumulative `text` per chunk, `meta_info` with `cached_tokens`.
- `llamacpp`: POST <url>/completion, `prompt` = ids, `cache_prompt`; the last chunk has `stop: true` and the
  cached prompt tokens in `timings.cache_n` (or `tokens_cached`).

A forced call or a JSON text format goes as the engine's JSON-schema option; a custom tool's grammar as the engine's
structural tag or lazy grammar (`constraints.py`, built only when a tool has one).

The HTTP side (pooled client, replicas, retries before the first token, error mapping) is
`client.UpstreamBackend`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Hashable, Sequence
from typing import Any, Literal

import msgspec

from hotloop.backends.base import BackendError, Delta, Finished, GenerationRequest, coalesced
from hotloop.backends.output_schema import output_schema
from hotloop.backends.toolcalls.harmony import HarmonyParser
from hotloop.backends.toolcalls.streaming import ToolParser, make_parser
from hotloop.backends.toolcalls.text import ToolCalls
from hotloop.backends.toolcalls.thinking import OPEN, ThinkParser
from hotloop.backends.upstream import constraints
from hotloop.backends.upstream.client import (
    Retryable,
    UpstreamBackend,
    decoded,
    engine_ms,
    mid_stream_error,
    preview,
)
from hotloop.backends.upstream.prompt_json import PromptJSON
from hotloop.chat.format import ChatFormat
from hotloop.config import Upstream

log = logging.getLogger(__name__)
PATHS = {"vllm": "/completions", "sglang": "/generate", "llamacpp": "/completion"}
_REFUSED_KEPT = 1024
# An engine's refusal of a grammar constraint: an HTTP 400/422 before any output, or a failure naming it (SGLang
# aborts a request whose grammar does not compile; llama.cpp fails one whose grammar it cannot parse).
_REFUSAL_WORDS = ("grammar", "structural_tag", "structured_outputs", "json_schema")
_decode = msgspec.json.Decoder().decode
_decode_many = msgspec.json.Decoder(list[Any]).decode


class _Attempt:
    """Whether a try at the engine gave any output: a refusal counts only before it."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = False


class TokensBackend(UpstreamBackend):
    def __init__(self, name: str, upstream: Upstream, chat: ChatFormat) -> None:
        super().__init__(name, upstream)
        self.name = name
        self.chat = chat
        self.path = PATHS[upstream.dialect]
        self.prompts = PromptJSON()
        # A template whose generation prompt opens the think block: the output starts inside it.
        probe = chat.render_text([{"role": "user", "content": "x"}], add_generation_prompt=True)
        self._opens_think = probe.rstrip().endswith(OPEN)
        # Sets of tools whose grammar constraint this engine refused (constraints.key): sent without it since.
        self._refused: set[Hashable] = set()

    @property
    def calls(self) -> str:
        """How the model writes tool calls: harmony's channels, or the tool parser's format."""
        return "harmony" if self.upstream.reasoning_parser == "harmony" else self.upstream.tool_parser

    @property
    def grammars(self) -> frozenset[str]:
        """The grammar syntaxes this engine is made to follow as the model writes (constraints.py)."""
        return constraints.followed(self.upstream.dialect, self.calls)

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        ids = self.prompts.encode(request.prompt_tokens, request.response_id, request.previous_response_id)
        upstream = self.upstream
        harmony = upstream.reasoning_parser == "harmony"  # its channels are special tokens
        refused = bool(self._refused) and constraints.key(self.calls, request) in self._refused
        return request_body(
            upstream.dialect, self.model, request, upstream.context_window, ids, harmony, self.calls, refused
        )

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        if request.tools and constraints.has_grammar(request):
            return self._grammar_first(request)
        return super().generate(request)

    async def _grammar_first(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        """A request with a custom tool's grammar: the grammar in the engine's terms is built (and cached) off the
        event loop before the body takes it (converting and checking a new grammar is CPU work). An engine that
        refuses it before any output (an engine or version without that form: vLLM 0.32's xgrammar takes no Lark
        in a structural tag) gets the turn again without it, and that set of tools is sent without it since: the
        server's own check judges the input, as on an engine that cannot take grammars at all."""
        upstream = self.upstream
        key = constraints.key(self.calls, request)
        refused = key in self._refused
        schema = output_schema(request)
        sent = await asyncio.to_thread(constraints.apply, upstream.dialect, self.calls, request, schema, refused)
        first = _Attempt()
        try:
            async for delta in self._relay(request, first):
                yield delta
            return
        except BackendError as exc:
            if first.started or refused or not constraints.carries_grammar(*sent) or not _refusal(exc):
                raise
            log.warning(
                "upstream %s refused a custom tool's grammar (%s); sending none for these tools", self.name, exc
            )
            if len(self._refused) >= _REFUSED_KEPT:
                self._refused.clear()
            self._refused.add(key)
        again = _Attempt()
        try:
            async for delta in self._relay(request, again):
                yield delta
        except BackendError:
            if not again.started:  # refused without the grammar too: it was not the grammar
                self._refused.discard(key)
            raise

    async def _relay(self, request: GenerationRequest, attempt: _Attempt) -> AsyncGenerator[Delta, None]:
        """One try at the engine (the body built now, the refusals as they stand), noting its first output."""
        async with contextlib.aclosing(super().generate(request)) as deltas:
            async for delta in deltas:
                attempt.started = True
                yield delta

    def reader(self, request: GenerationRequest) -> _Reader:
        parser: ToolParser = make_parser(self.upstream.tool_parser, request.tools, request.parallel_tool_calls)
        if self.upstream.reasoning_parser == "harmony":  # the channels carry the calls too
            parser = HarmonyParser(ToolCalls(request.tools, request.parallel_tool_calls))
        elif self.upstream.reasoning_parser == "think":
            parser = ThinkParser(parser, open_in_prompt=self._opens_think)
        if self.upstream.dialect == "sglang":
            return _SGLangReader(parser, len(request.prompt_tokens), self.upstream.sglang_incremental_output)
        return READERS[self.upstream.dialect](parser, len(request.prompt_tokens))

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        """`generate: false` sends nothing: the first generating turn fills the engine's prefix cache."""
        return 0


def request_body(
    dialect: str,
    model: str,
    request: GenerationRequest,
    context_window: int,
    ids: msgspec.Raw | None = None,
    keep_special: bool = False,
    calls: str = "hermes",
    refused: bool = False,
) -> dict[str, Any]:
    """The engine's request: the prompt's ids (`ids`: already as JSON), the output budget, sampling and an output
    schema if any; `keep_special`: the special tokens stay in the generated text (harmony's markers); `calls`: how
    the model writes tool calls (`harmony`, or the tool parser), for the custom tools' grammars; `refused`: the
    engine refused this request's grammars before, none is sent."""
    prompt: msgspec.Raw | list[int] = ids if ids is not None else list(request.prompt_tokens)
    # SGLang refuses prompt + max_new_tokens >= its context length; vLLM and llama.cpp take the whole window.
    room = context_window - len(request.prompt_tokens) - (1 if dialect == "sglang" else 0)
    budget = request.max_output_tokens or max(1, room)
    sampling: dict[str, Any] = {  # always numbers: older SGLang releases fail on a null knob
        "temperature": request.temperature,
        "top_p": request.top_p,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
    }
    schema = output_schema(request)  # a forced call or a JSON text format: constrained decoding
    grammar: dict[str, Any] | None = None  # custom tools' grammars, in the engine's terms (constraints.py)
    if request.tools and constraints.has_grammar(request):
        schema, grammar = constraints.apply(dialect, calls, request, schema, refused)
    if keep_special:  # vLLM and SGLang both take these; vLLM would otherwise put spaces around special tokens
        sampling["skip_special_tokens"] = False
        sampling["spaces_between_special_tokens"] = False
    if dialect == "sglang":
        sampling["max_new_tokens"] = budget
        if schema is not None:
            sampling["json_schema"] = json.dumps(schema)
        if grammar is not None:
            sampling.update(grammar)
        return {"input_ids": prompt, "sampling_params": sampling, "stream": True}
    if dialect == "llamacpp":
        body = {"prompt": prompt, "n_predict": budget, "stream": True, "cache_prompt": True, **sampling}
        if schema is not None:
            body["json_schema"] = schema
        if grammar is not None:
            body.update(grammar)
        return body
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": budget,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    if grammar is not None:
        body.update(grammar)
    return body


class _Reader:
    """One attempt's stream: generated text through the tool parser; the engine's counts for `Finished`."""

    def __init__(self, parser: ToolParser, prompt_tokens: int) -> None:
        self.parser = parser
        self.started = False  # a delta has been yielded: no retry from here on
        self.done = False  # llama.cpp: the `stop: true` chunk is the last
        self.reason: Literal["stop", "length"] | None = None
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        self.output_tokens: int | None = None
        self.engine_ms: float | None = None
        self.pieces = 0
        self.failure: Exception | None = None

    def feed(self, payloads: Sequence[bytes]) -> list[Delta]:
        texts: list[str] = []
        try:
            for data, chunk in zip(payloads, decoded(payloads, _decode, _decode_many), strict=False):
                if self.done:
                    break  # llama.cpp: nothing counts after the `stop: true` chunk
                if not isinstance(chunk, dict):
                    raise BackendError(f"The upstream engine sent an unexpected chunk: {preview(data)}")
                if chunk.get("error") is not None:
                    raise mid_stream_error(msgspec.json.encode({"error": chunk["error"]}))
                text = self.read(chunk)
                if text:
                    texts.append(text)
        except (BackendError, Retryable) as exc:
            self.failure = exc
        if not texts:
            return []
        self.pieces += len(texts)
        # One parser step for the read's text: the text and call-argument deltas it makes come out whole.
        out = coalesced(self.parser.feed("".join(texts)))
        self.started = self.started or bool(out)
        return out

    def read(self, chunk: dict[str, Any]) -> str:
        """The chunk's new text; records the finish and the counts it carries."""
        raise NotImplementedError

    def end(self) -> list[Delta]:
        if self.reason is None:
            raise Retryable(BackendError("The upstream engine ended its stream without a finish reason."))
        finished = Finished(
            reason=self.reason,
            output_tokens=self.output_tokens if self.output_tokens is not None else self.pieces,
            cached_tokens=min(self.cached_tokens, self.prompt_tokens),
            prompt_tokens=self.prompt_tokens,
            engine_ms=self.engine_ms,
        )
        return [*self.parser.finish(cut=self.reason == "length"), finished]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _VLLMReader(_Reader):
    """OpenAI's text_completion chunks: `choices[0].text`, `finish_reason`, then a usage-only chunk."""

    def read(self, chunk: dict[str, Any]) -> str:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("prompt_tokens")) or self.prompt_tokens
            self.output_tokens = _int(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details")
            self.cached_tokens = (_int(details.get("cached_tokens")) or 0) if isinstance(details, dict) else 0
        text = ""
        for choice in chunk.get("choices") or ():
            text += choice.get("text") or ""
            finish = choice.get("finish_reason")
            if finish == "abort":  # vLLM aborted the request (preempted, engine shutting down): not an answer
                raise Retryable(BackendError("The upstream engine aborted the request."))
            if finish is not None:
                self.reason = "length" if finish == "length" else "stop"
        return text


class _SGLangReader(_Reader):
    """SGLang's /generate chunks: the text so far and `meta_info` with the finish and counts.

    The text is cumulative unless the server runs with `--incremental-streaming-output` (then set
    `sglang_incremental_output`): guessing from the text itself would drop a piece that repeats its start."""

    def __init__(self, parser: ToolParser, prompt_tokens: int, incremental: bool = False) -> None:
        super().__init__(parser, prompt_tokens)
        self.incremental = incremental
        self.sent = 0  # characters of the cumulative text already passed on

    def read(self, chunk: dict[str, Any]) -> str:
        text = chunk.get("text") or ""
        new = text if self.incremental else text[self.sent :]
        self.sent = self.sent if self.incremental else max(self.sent, len(text))
        meta = chunk.get("meta_info")
        if isinstance(meta, dict):
            self.prompt_tokens = _int(meta.get("prompt_tokens")) or self.prompt_tokens
            self.output_tokens = _int(meta.get("completion_tokens"))
            self.cached_tokens = _int(meta.get("cached_tokens")) or 0
            finish = meta.get("finish_reason")
            if isinstance(finish, dict):
                if finish.get("type") == "abort":
                    raise Retryable(BackendError(f"The upstream engine aborted: {finish.get('message', '')}"))
                self.reason = "length" if finish.get("type") == "length" else "stop"
        return new


class _LlamaCppReader(_Reader):
    """llama.cpp's /completion chunks: `content` pieces; `stop: true` ends with the counts and `stop_type`."""

    def read(self, chunk: dict[str, Any]) -> str:
        if chunk.get("stop") is True:
            self.done = True
            self.reason = "length" if chunk.get("stop_type") == "limit" or chunk.get("truncated") else "stop"
            self.prompt_tokens = _int(chunk.get("tokens_evaluated")) or self.prompt_tokens
            self.output_tokens = _int(chunk.get("tokens_predicted"))
            timings = chunk.get("timings")
            self.engine_ms = engine_ms(timings)
            cached = _int(timings.get("cache_n")) if isinstance(timings, dict) else None
            self.cached_tokens = cached if cached is not None else _int(chunk.get("tokens_cached")) or 0
        content = chunk.get("content")
        return content if isinstance(content, str) else ""


def _refusal(exc: BackendError) -> bool:
    message = str(exc)
    if exc.code != "server_error":  # a rate limit, a prompt too long: not the grammar's doing
        return False
    return " answered 400" in message or " answered 422" in message or any(w in message for w in _REFUSAL_WORDS)


READERS: dict[str, type[_Reader]] = {"vllm": _VLLMReader, "sglang": _SGLangReader, "llamacpp": _LlamaCppReader}
