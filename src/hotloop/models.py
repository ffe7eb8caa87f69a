"""The served models: `model` → backend, chat format and limits, resolved once per request (or chain)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from hotloop.backends.base import Backend
from hotloop.chat.format import ChatFormat
from hotloop.chat.reasoning import NO_REASONING, ReasoningPrompt
from hotloop.chat.render import Style
from hotloop.config import Settings, Upstream
from hotloop.errors import ModelNotFound
from hotloop.observability.metrics import KVReading, ReplicaReading

SMOLLM2 = "smollm2-135m"
SIM = "hotloop-sim"
KNOWN_MODELS = (SMOLLM2, SIM)


class Model:
    __slots__ = ("backend", "chat", "context_window", "created", "grammars", "id", "owned_by", "reasoning", "style")

    def __init__(
        self,
        id: str,
        backend: Backend,
        chat: ChatFormat,
        context_window: int,
        *,
        takes_messages: bool = False,
        reasoning: ReasoningPrompt = NO_REASONING,
        grammars: frozenset[str] = frozenset(),
    ) -> None:
        self.id = id
        # The grammar syntaxes (lark, regex) whose custom tools' inputs this model is made to follow as it writes
        # them; any other grammar is checked once the input is written (tools/grammar.py). Codex's catalog offers
        # the freeform `apply_patch` to a model with `lark` (`follows_codex_patches`, wire/codex_catalog.py).
        self.grammars = grammars
        self.backend = backend
        self.chat = chat
        self.context_window = context_window
        self.created = int(time.time())
        self.owned_by = "hotloop"
        # How the prompts hotloop renders carry reasoning items back (chat/reasoning.py).
        self.reasoning = reasoning
        # How its prompts are written (chat/render.py): the dialect, chosen once; an upstream engine's chat API
        # (`takes_messages`) gets items, not tokens (backends/upstream/chat.py).
        self.style = Style.of(chat, reasoning, tokens=not takes_messages)

    @property
    def follows_codex_patches(self) -> bool:
        """Codex's apply_patch grammar (Lark) is followed as the model writes."""
        return "lark" in self.grammars

    @property
    def takes_messages(self) -> bool:
        return not self.style.tokens


class ModelRegistry:
    def __init__(self, models: dict[str, Model], default: str) -> None:
        self._models = models
        self.default = default

    def resolve(self, name: str | None) -> Model:
        # Only a missing or null model means the default (protocol.md §1.2); "" names no served model.
        wanted = self.default if name is None else name
        model = self._models.get(wanted)
        if model is None:
            raise ModelNotFound(wanted)
        return model

    def __iter__(self) -> Iterator[Model]:
        return iter(self._models.values())

    def kv_readings(self) -> list[KVReading]:
        """KV state reuse of the in-process models (backends/local/kv_state.py), for /metrics."""
        out: list[KVReading] = []
        for model in self._models.values():
            reading = getattr(model.backend, "kv_reading", None)
            if reading is not None:
                out.append(reading(model.id))
        return out

    def replica_readings(self) -> list[ReplicaReading]:
        """Routing counts and health of every upstream replica (backends/upstream/routing.py), for /metrics."""
        out: list[ReplicaReading] = []
        for model in self._models.values():
            router = getattr(model.backend, "router", None)
            if router is not None:
                out += router.readings()
        return out

    async def close(self) -> None:
        for model in self._models.values():
            await model.backend.close()


def build_registry(settings: Settings) -> ModelRegistry:
    """Load the configured models; raises `ValueError` for an unknown name."""
    from hotloop.backends.local.gguf import smollm2_chat_format
    from hotloop.backends.sim.backend import SimBackend, SimSettings
    from hotloop.chat.incremental import probe_incremental

    shadowed = [name for name in settings.upstreams if name in KNOWN_MODELS]
    if shadowed:
        raise ValueError(f"upstreams {shadowed}: a built-in model's name; choose another name")
    unknown = [name for name in settings.models if name not in KNOWN_MODELS and name not in settings.upstreams]
    if unknown:
        raise ValueError(
            f"unknown model(s) {unknown}: not built in ({list(KNOWN_MODELS)}) and not defined in an "
            "[upstreams.<name>] table (docs/backends.md)"
        )
    if settings.default_model not in settings.models:
        raise ValueError(f"default_model {settings.default_model!r} is not in models {settings.models}")
    served = {name: settings.upstreams[name] for name in settings.models if name in settings.upstreams}
    for name, upstream in served.items():  # before any backend loads
        _check_upstream(name, upstream)
    chat = smollm2_chat_format()
    probe_incremental(chat)
    models: dict[str, Model] = {}
    if SIM in settings.models:
        sim = SimSettings(
            ttft_ms=settings.sim_ttft_ms,
            tps=settings.sim_tps,
            output_tokens=settings.sim_output_tokens,
            tool_calls=settings.sim_tool_calls,
            parallel_calls=settings.sim_parallel_calls,
            seed=settings.sim_seed,
            reasoning_tokens=settings.sim_reasoning_tokens,
            prefer=tuple(settings.sim_prefer_tools),
        )
        # hotloop-sim thinks as a `<think>` model does: its reasoning goes back into the prompt it renders.
        thinker = ReasoningPrompt(form="think")
        window = settings.sim_context_window
        # hotloop-sim draws every custom input from its tool's grammar.
        everything = frozenset({"lark", "regex"})
        simulated = SimBackend(sim, decode=chat.tokenizer.decode)  # it reads its prompt's last messages (file_search)
        models[SIM] = Model(SIM, simulated, chat, context_window=window, reasoning=thinker, grammars=everything)
    if SMOLLM2 in settings.models:
        from hotloop.backends.local.llama import LlamaBackend

        backend = LlamaBackend(
            n_ctx=settings.llama_n_ctx,
            n_threads=settings.llama_threads or None,
            kv_cache_bytes=settings.llama_kv_cache_bytes,
        )
        # Regex and Lark grammars constrain its decoding (backends/local/guided.py: a Lark grammar as one regex, or
        # JSON-escaped when it has recursion; one with `%ignore` or flags is checked afterwards).
        models[SMOLLM2] = Model(
            SMOLLM2, backend, chat, context_window=settings.llama_n_ctx, grammars=frozenset({"lark", "regex"})
        )
    for name, upstream in served.items():
        models[name] = _upstream_model(name, upstream, chat)
    return ModelRegistry(models, settings.default_model)


def _check_upstream(name: str, upstream: Upstream) -> None:
    urls = upstream.base_urls()
    if upstream.url and upstream.urls:
        raise ValueError(f"upstreams.{name}: give url or urls, not both")
    if not urls:
        raise ValueError(f"upstreams.{name}: url is required")
    for field in ("connect_timeout_s", "read_timeout_s", "max_connections", "context_window", "replica_failures"):
        if getattr(upstream, field) <= 0:
            raise ValueError(f"upstreams.{name}.{field} must be positive")
    if upstream.retries < 0:
        raise ValueError(f"upstreams.{name}.retries must be 0 or more")
    if upstream.reasoning_parser == "harmony" and (upstream.backend != "tokens" or upstream.dialect == "llamacpp"):
        # llama.cpp's /completion leaves special tokens out of its text: its chat API parses harmony itself.
        raise ValueError(
            f"upstreams.{name}.reasoning_parser: harmony needs backend tokens with dialect vllm or sglang "
            "(for llama.cpp's server use backend openai-chat)"
        )
    if upstream.replica_max_in_flight < 0 or upstream.down_cooldown_s < 0:
        raise ValueError(f"upstreams.{name}: replica_max_in_flight and down_cooldown_s must be 0 or more")


def _upstream_model(name: str, upstream: Upstream, chat: ChatFormat) -> Model:
    if upstream.backend == "tokens":
        from hotloop.backends.upstream.hf_format import load_chat_format
        from hotloop.backends.upstream.tokens import TokensBackend
        from hotloop.chat.incremental import probe_incremental

        # hotloop renders and tokenizes with the model's own format, incrementally per chain (chat/incremental.py).
        fmt = load_chat_format(name, upstream)
        probe_incremental(fmt)
        reasoning = ReasoningPrompt(form=upstream.reasoning_parser, replay=upstream.reasoning_replay)
        backend = TokensBackend(name, upstream, fmt)
        # gpt-oss on vLLM or SGLang is held to a custom tool's grammar by the engine (Codex's freeform apply_patch).
        return Model(name, backend, fmt, upstream.context_window, reasoning=reasoning, grammars=backend.grammars)
    from hotloop.backends.upstream.chat import OpenAIChatBackend

    # `chat` is not used to render for an upstream (its engine has its own template); every Model has one.
    engine = OpenAIChatBackend(name, upstream)
    return Model(name, engine, chat, upstream.context_window, takes_messages=True)
