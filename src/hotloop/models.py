"""The served models: `model` → backend, chat format and limits, resolved once per request (or chain)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from hotloop.backends.base import Backend
from hotloop.config import Settings
from hotloop.errors import ModelNotFound
from hotloop.pipeline.render import ChatFormat

SMOLLM2 = "smollm2-135m"
SIM = "hotloop-sim"
KNOWN_MODELS = (SMOLLM2, SIM)


class Model:
    __slots__ = ("backend", "chat", "context_window", "created", "id", "owned_by")

    def __init__(self, id: str, backend: Backend, chat: ChatFormat, context_window: int) -> None:
        self.id = id
        self.backend = backend
        self.chat = chat
        self.context_window = context_window
        self.created = int(time.time())
        self.owned_by = "hotloop"


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

    async def close(self) -> None:
        for model in self._models.values():
            await model.backend.close()


def build_registry(settings: Settings) -> ModelRegistry:
    """Load the configured models; raises `ValueError` for an unknown name."""
    from hotloop.backends.gguf import smollm2_chat_format
    from hotloop.backends.sim import SimBackend, SimSettings
    from hotloop.pipeline.tokens import probe_incremental

    unknown = [name for name in settings.models if name not in KNOWN_MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {list(KNOWN_MODELS)}")
    if settings.default_model not in settings.models:
        raise ValueError(f"default_model {settings.default_model!r} is not in models {settings.models}")
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
        )
        models[SIM] = Model(SIM, SimBackend(sim), chat, context_window=131_072)
    if SMOLLM2 in settings.models:
        from hotloop.backends.llama import LlamaBackend

        backend = LlamaBackend(n_ctx=settings.llama_n_ctx, n_threads=settings.llama_threads or None)
        models[SMOLLM2] = Model(SMOLLM2, backend, chat, context_window=settings.llama_n_ctx)
    return ModelRegistry(models, settings.default_model)
