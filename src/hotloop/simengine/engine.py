"""The engine: prompt tokens in, hotloop-sim's deltas out, paced by the cost model; counters and test faults."""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from typing import Any

import msgspec

from hotloop.backends.base import Delta, Finished, GenerationRequest
from hotloop.backends.sim.backend import FAULT_KEY, SimBackend, SimSettings
from hotloop.chat.format import ChatFormat
from hotloop.simengine.costs import PrefixCache, prefill_ms
from hotloop.simengine.scan import PromptScans
from hotloop.simengine.writers import TextWriter, writer


class EngineSettings(msgspec.Struct, frozen=True, kw_only=True):
    model: str = "sim-engine"
    tps: float = 1000.0
    prefill_us_per_token: float = 50.0
    prefix_cache_entries: int = 256
    output_tokens: int = 32
    tool_calls: int = 2
    parallel_calls: int = 1
    seed: int = 0
    # A reasoning model: tokens of thinking before each answer or call, streamed in the chat API's `reasoning_field`
    # (vLLM, SGLang, llama.cpp's server: `reasoning_content`; newer vLLM and Ollama: `reasoning`).
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning_content"
    # How a completion prompt's output is written: Hermes-style `<tool_call>` blocks (and `<think>`), or gpt-oss's
    # harmony channels. `tokenizer`: a tokenizer.json to use instead of SmolLM2's (the model's own ids).
    output_format: str = "hermes"
    tokenizer: str = ""
    # A structural tag's grammar content may be Lark (`"syntax": "lark"`, xgrammar 0.2.9 on); false: EBNF only, and a
    # Lark one is refused with a 400, as vLLM 0.32.0 (xgrammar 0.2.8) refuses it.
    structural_tag_lark: bool = True
    # Tool names called before any other when offered (hotloop-sim's `sim_prefer_tools`), comma-separated.
    prefer_tools: str = ""


class Override(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the next request does instead of the normal (POST /sim/script, a test facility)."""

    status: int | None = None  # answer with this HTTP error instead
    message: str = "simulated engine error"
    stall_after: int | None = None  # stop sending after N output tokens (the connection stays open)
    die_after: int | None = None  # an error chunk after N output tokens, then the stream ends
    tps: float | None = None
    output_tokens: int | None = None


class Stats(msgspec.Struct, kw_only=True):
    """GET /stats: what the engine did since start (or the last reset)."""

    requests: int = 0  # every generation request, errors included
    active: int = 0
    completed: int = 0
    cancelled: int = 0  # streams the client closed before their end
    failed: int = 0  # scripted errors
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    last_model: str = ""
    # SHA-256 of the last request's Authorization header ("" without one): tests check which key came, and
    # /stats never shows a key itself.
    last_authorization_sha256: str = ""


class RequestRecord(msgspec.Struct, kw_only=True):
    """GET /stats/requests: one generation request as the engine itself timed it (gateway comparisons)."""

    seq: int  # 1, 2, … since start (or the last reset)
    path: str
    # The request's first ASGI call (headers parsed) → its last body byte handed to the server: everything the
    # engine did for it, request parsing and tokenization included.
    ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_chars: int = 0  # a chat request's reasoning sent back on its assistant messages
    # A token-ID request: the ids of the text it generated plus the end-of-turn token, which the prefix cache keeps
    # after its prompt (a continuation that replays the output exactly finds prompt + these cached).
    output_ids: int = 0
    # The W3C trace context the request came with ("" without one): a gateway's trace reaches the engine.
    traceparent: str = ""
    # A token-ID request's constrained-decoding fields exactly as they came (vLLM `response_format` /
    # `structured_outputs`, SGLang `sampling_params` {json_schema, regex, ebnf, structural_tag}, llama.cpp
    # `json_schema` / `grammar` / `grammar_lazy` / `grammar_triggers` / `preserved_tokens`); null without any.
    constraint: dict[str, Any] | None = None
    # A chat request's tools that carried `strict`, by name (an engine may hold their arguments to the schema).
    strict: dict[str, bool] = msgspec.field(default_factory=dict)


REQUEST_LOG_ENTRIES = 4096
# The record of the request being served: set by the timing middleware (app.py), filled in by `Engine.generate`
# (the response's body runs in a task that copies this context, so it sees the same record).
current_record: ContextVar[RequestRecord | None] = ContextVar("current_record", default=None)


def authorization_digest(authorization: str) -> str:
    return hashlib.sha256(authorization.encode()).hexdigest() if authorization else ""


class Engine:
    def __init__(self, settings: EngineSettings, chat: ChatFormat) -> None:
        self.settings = settings
        self.chat = chat
        self.cache = PrefixCache(settings.prefix_cache_entries)
        self.scans = PromptScans(chat.tokenizer.decode)
        sim = SimSettings(
            tps=settings.tps,
            output_tokens=settings.output_tokens,
            tool_calls=settings.tool_calls,
            parallel_calls=settings.parallel_calls,
            seed=settings.seed,
            reasoning_tokens=settings.reasoning_tokens,
            prefer=tuple(name for name in settings.prefer_tools.split(",") if name),
        )
        self.sim = SimBackend(sim)  # hotloop-sim's output and tool policy, shared, not copied
        self.stats = Stats()
        self.script: deque[Override] = deque()
        self.requests: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_ENTRIES)
        self._seq = 0

    def reset(self) -> None:
        self.stats = Stats()
        self.script.clear()
        self.requests.clear()
        self._seq = 0
        self.cache = PrefixCache(self.settings.prefix_cache_entries)
        self.scans = PromptScans(self.chat.tokenizer.decode)

    def record(self, path: str, traceparent: str = "") -> RequestRecord:
        """A new entry in the request log (the timing middleware fills in its time)."""
        self._seq += 1
        entry = RequestRecord(seq=self._seq, path=path, traceparent=traceparent)
        self.requests.append(entry)
        return entry

    def requests_after(self, seq: int) -> list[RequestRecord]:
        return [entry for entry in self.requests if entry.seq > seq]

    def admit(self, model: str, authorization: str) -> Override | None:
        """Count a request and take its scripted override, if any."""
        self.stats.requests += 1
        self.stats.last_model = model
        self.stats.last_authorization_sha256 = authorization_digest(authorization)
        return self.script.popleft() if self.script else None

    async def generate(
        self,
        tokens: Sequence[int],
        override: Override | None,
        thinking: bool = True,
        cache_output: bool = False,
        **request: Any,
    ) -> AsyncGenerator[Delta, None]:
        """The deltas of one generation; `Finished` carries the prompt size and the cached prefix. `thinking`
        false: the request turned the model's reasoning off. `cache_output` (token-ID APIs): the prefix cache
        keeps the prompt followed by the generated text's ids, as vLLM's and SGLang's prefix caches keep the
        blocks a request generated."""
        cached = self.cache.match(tokens)
        metadata = {"sim_ttft_ms": str(prefill_ms(len(tokens), cached, self.settings.prefill_us_per_token))}
        if not thinking:
            metadata["sim_reasoning_tokens"] = "0"
        if override is not None:
            if override.tps is not None:
                metadata["sim_tps"] = str(override.tps)
            if override.output_tokens is not None:
                metadata["sim_output_tokens"] = str(override.output_tokens)
            if override.stall_after is not None:
                metadata[FAULT_KEY] = f"stall_after:{override.stall_after}"
            elif override.die_after is not None:
                metadata[FAULT_KEY] = f"die_after:{override.die_after}"
        generation = GenerationRequest(prompt_tokens=tokens, metadata=metadata, **request)
        self.stats.prompt_tokens += len(tokens)
        self.stats.cached_tokens += cached
        entry = current_record.get()
        if entry is not None:
            entry.prompt_tokens, entry.cached_tokens = len(tokens), cached
        written = self.writer() if cache_output else None
        text: list[str] = []
        async for delta in self.sim.generate(generation):
            if written is not None:
                text.append(written(delta))
            if isinstance(delta, Finished):
                if written is not None:
                    self._cache_output(tokens, "".join(text), entry)
                self.stats.completion_tokens += delta.output_tokens
                if entry is not None:
                    entry.output_tokens = delta.output_tokens
                delta = Finished(
                    delta.reason,
                    delta.output_tokens,
                    cached,
                    prompt_tokens=len(tokens),
                    reasoning_tokens=delta.reasoning_tokens,
                )
            yield delta

    def writer(self) -> TextWriter:
        return writer(self.settings.output_format)

    def _cache_output(self, prompt: Sequence[int], text: str, entry: RequestRecord | None) -> None:
        # Harmony's output ends with its own end token (`<|call|>`, `<|return|>`) in the text.
        end = [] if self.settings.output_format == "harmony" else self.chat.eos_ids
        output = [*self.chat.tokenizer.encode(text), *end]
        self.cache.remember([*prompt, *output])
        if entry is not None:
            entry.output_ids = len(output)

    async def counted(self, stream: AsyncGenerator[bytes, None], failed: Callable[[], bool]) -> AsyncIterator[bytes]:
        """A response stream, counted: one closed before its end (the client went away) is `cancelled`."""
        self.stats.active += 1
        ended = False
        try:
            async for chunk in stream:
                yield chunk
            ended = True
        finally:
            self.stats.active -= 1
            if failed():
                self.stats.failed += 1
            elif ended:
                self.stats.completed += 1
            else:
                self.stats.cancelled += 1
            await stream.aclose()
