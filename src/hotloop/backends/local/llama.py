"""`smollm2-135m`: SmolLM2-135M-Instruct run in-process by llama-cpp-python.

Generation runs on a worker thread (never on the event loop) and streams tokens through a queue; closing the
stream (client gone) stops the thread at the next prompt chunk or token. llama.cpp's context holds the KV cells of
what was evaluated last; before another chain overwrites them they are kept as a snapshot (`kv_state.py`), so a
request restores whichever (the live context or a snapshot) shares the longest prefix with its prompt and
evaluates only the rest. The tokens not evaluated are reported as `cached_tokens`.

Sampling: `temperature` 0 is greedy; otherwise llama-cpp-python's chain (top-k 40, top-p, min-p 0.05, temperature)
with the backend's fixed seed, so the same prompt and parameters give the same output. Generation stops at an
end-of-generation token (`<|im_end|>`, `<|endoftext|>`), at a new turn (`<|im_start|>`), or after
`max_output_tokens` (`Finished("length")`).
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import json
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from hotloop.backends.base import Delta, Finished, GenerationRequest
from hotloop.backends.local.gguf import load_llama
from hotloop.backends.local.guided import GuidedLogits, guided_grammar
from hotloop.backends.local.kv_state import MIN_SNAPSHOT_TOKENS, KVStateCache, as_tokens, restore, save
from hotloop.backends.output_schema import output_schema
from hotloop.backends.toolcalls.text import ToolCallParser
from hotloop.observability.metrics import KVReading
from hotloop.tools.grammar import on_big_stack

log = logging.getLogger("hotloop.llama")
_END = object()
STOP_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
# Prompt tokens evaluated between two checks of the stop flag: a long prompt is abandoned within one chunk.
PROMPT_CHUNK = 256
DEFAULT_KV_CACHE_BYTES = 256 * 1024 * 1024


class _Cancelled(Exception):
    pass


def _guided(request: GenerationRequest) -> bool:
    """Whether the offered tools hold a grammar llama.cpp's converter cannot take (a custom tool's regex): then
    llguidance masks the logits (guided.py) instead of a llama.cpp grammar."""
    return any(spec.grammar is not None for spec in request.tools)


def _processors(llama: Any, request: GenerationRequest, prompt_length: int) -> list[Any] | None:
    """llguidance's mask when a custom tool has a grammar: over the whole answer for a forced call, from the
    opening of a `<tool_call>` block otherwise (tool_choice auto); None without one, or if it cannot be built."""
    if not _guided(request) or request.tool_choice == "none":
        return None
    lazy = request.tool_choice != "required"
    if lazy:  # every offered tool's call, any of them
        request = msgspec.structs.replace(request, tool_choice="required", forced_tool=None)
    try:
        grammar = on_big_stack(lambda: guided_grammar(request, lazy))  # a deep grammar's parse recurses
        return None if grammar is None else [GuidedLogits(llama, grammar, prompt_length, lazy)]
    except Exception:  # a schema llguidance does not take: generate freely, the server's check judges the input
        log.warning("could not build the guided decoding; generating without it", exc_info=True)
        return None


def _grammar(request: GenerationRequest) -> Any:
    """A llama.cpp grammar constraining sampling to `output_schema`; None when there is none or it cannot be built."""
    schema = output_schema(request)
    if schema is None or _guided(request):
        return None
    from llama_cpp import LlamaGrammar

    try:
        return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception:  # an unsupported schema construct: generate unconstrained rather than fail
        log.warning("could not turn the output schema into a grammar; generating without it", exc_info=True)
        return None


class LlamaBackend:
    def __init__(
        self,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
    ) -> None:
        self.n_ctx = n_ctx
        self._kv = KVStateCache(kv_cache_bytes)  # snapshots of other chains' KV cells (lock held to use)
        self._llama: Any = load_llama(n_ctx=n_ctx, n_threads=n_threads or os.cpu_count() or 1)
        self._llama.set_seed(seed)  # the constructor reads seed 0 as "random"
        atexit.register(self._llama.close)  # before teardown, where llama-cpp-python's `__del__` fails
        self._lock = threading.Lock()  # one llama.cpp context: one generation at a time
        self._active: set[threading.Event] = set()  # stop flags of running generations (set all on close)
        self._closed = False
        self._stops = {self._llama.token_eos()}
        for text in STOP_TEXTS:
            ids = self._llama.tokenize(text.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                self._stops.add(ids[0])

    def _common_prefix(self, tokens: np.ndarray) -> int:
        """The prompt tokens the live context lets us skip, mirroring `Llama.generate`'s prefix reuse.

        A prompt fully in the context as the last thing evaluated is reused whole (its logits are live); a prompt
        that is a proper prefix of the context keeps one token back to refresh the logits; otherwise the shared
        prefix is kept.
        """
        llama = self._llama
        cached = llama._input_ids
        limit = min(len(cached), len(tokens))
        mismatch = np.flatnonzero(cached[:limit] != tokens[:limit])
        shared = int(mismatch[0]) if mismatch.size else limit
        if shared == len(tokens) and shared > 0:
            exact = llama.n_tokens == len(tokens) and not getattr(llama, "_requires_eval", True)
            return shared if exact else shared - 1
        return shared

    def _reuse(self, tokens: np.ndarray) -> tuple[int, bool]:
        """Bring the best cached prefix of `tokens` into the context (lock held): the live context, else a
        snapshot that beats it by at least MIN_SNAPSHOT_TOKENS. Returns the tokens reused and whether a snapshot
        was restored. The live context is snapshotted first when the prompt would discard a worthwhile part of it.
        """
        llama = self._llama
        live = self._common_prefix(tokens)
        snapshot, shared = self._kv.best(tokens) if len(self._kv) else (None, 0)
        use_snapshot = snapshot is not None and shared >= live + MIN_SNAPSHOT_TOKENS
        kept = 0 if use_snapshot else live
        if llama.n_tokens - kept >= MIN_SNAPSHOT_TOKENS and self._kv.max_bytes > 0:
            self._stash()
        if snapshot is None or not use_snapshot:
            return live, False
        try:
            restore(llama, snapshot)
        except RuntimeError:  # llama.cpp refused the cells: the context is empty now, prefill from scratch
            log.warning("could not restore a KV state snapshot; prefilling the prompt", exc_info=True)
            self._kv.discard(snapshot)
            return 0, False
        return min(shared, len(tokens) - 1), True  # restored logits are stale: evaluate at least one token

    def _stash(self) -> None:
        """Snapshot the live context unless a snapshot already holds all of it (lock held)."""
        if self._kv.covers(np.asarray(self._llama._input_ids)):
            return
        try:
            self._kv.put(save(self._llama))
        except RuntimeError:  # not worth failing the request over: that chain prefills again later
            log.warning("could not snapshot the KV state", exc_info=True)

    def _evaluate_prompt(self, tokens: list[int], stop: threading.Event | None) -> int:
        """Bring the KV cache to exactly `tokens` (lock held); returns the tokens reused. Raises `_Cancelled`."""
        llama = self._llama
        cached, restored = self._reuse(as_tokens(tokens))
        evaluated = 0
        try:
            if cached == len(tokens):
                return cached
            llama.n_tokens = cached  # `eval` drops the KV cache past n_tokens first
            for start in range(cached, len(tokens), PROMPT_CHUNK):
                if stop is not None and stop.is_set():
                    llama.n_tokens = start  # what has been evaluated so far stays reusable
                    raise _Cancelled
                chunk = tokens[start : start + PROMPT_CHUNK]
                llama.eval(chunk)
                evaluated += len(chunk)
            return cached
        finally:
            self._kv.count(cached, evaluated, restored=restored)

    def kv_reading(self, model: str) -> KVReading:
        """KV reuse counters and the snapshots' size (read without the lock: plain integers)."""
        return self._kv.reading(model)

    def drop_state(self) -> None:
        """Forget the live context and every snapshot: the next prompt is prefilled from scratch."""
        with self._lock:
            self._kv.clear()
            if not self._closed:
                self._llama.reset()

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        def work() -> int:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the model is closed")
                return self._evaluate_prompt(list(prompt_tokens), None)

        return await asyncio.to_thread(work)

    async def close(self) -> None:
        for flag in list(self._active):
            flag.set()

        def work() -> None:
            with self._lock:
                if not self._closed:
                    self._closed = True
                    self._llama.close()

        await asyncio.to_thread(work)

    def _run(
        self, request: GenerationRequest, emit: Callable[[str], None], stop: threading.Event, result: dict[str, Any]
    ) -> None:
        llama = self._llama
        tokens = list(request.prompt_tokens)
        budget = self.n_ctx - len(tokens)
        if request.max_output_tokens is not None:
            budget = min(budget, request.max_output_tokens)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        grammar = _grammar(request)
        processors = _processors(llama, request, len(tokens))
        count = 0
        reason = "stop"
        with self._lock:
            if self._closed:
                raise RuntimeError("the model is closed")
            # Evaluated here, in chunks, so that a closed stream stops a long prompt early; `generate` then finds
            # the whole prompt cached with live logits and samples at once.
            result["cached"] = self._evaluate_prompt(tokens, stop)
            if budget <= 0:
                reason = "length"
            else:
                for token in llama.generate(
                    tokens,
                    temp=max(0.0, request.temperature),
                    top_p=request.top_p,
                    presence_penalty=request.presence_penalty,
                    frequency_penalty=request.frequency_penalty,
                    grammar=grammar,
                    logits_processor=processors,
                    reset=True,
                ):
                    if stop.is_set():
                        raise _Cancelled
                    if token in self._stops:
                        break
                    count += 1
                    text = decoder.decode(llama.detokenize([token]))
                    if text:
                        emit(text)
                    if count >= budget:
                        reason = "length"
                        break
            tail = decoder.decode(b"", final=True)
            if tail:
                emit(tail)
        result["count"], result["reason"] = count, reason

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        result: dict[str, Any] = {}

        def post(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is gone (server shutting down): nobody is listening
                stop.set()

        def work() -> None:
            try:
                self._run(request, post, stop, result)
            except _Cancelled:
                pass
            except BaseException as exc:  # handed to the consumer
                post(exc)
            finally:
                self._active.discard(stop)
                post(_END)

        self._active.add(stop)
        thread = threading.Thread(target=work, name="hotloop-llama", daemon=True)
        thread.start()
        parser = ToolCallParser(request.tools, request.parallel_tool_calls)
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                for delta in parser.feed(item):
                    yield delta
            if "reason" not in result:
                raise RuntimeError("generation was stopped")
            for delta in parser.finish(cut=result["reason"] == "length"):
                yield delta
            yield Finished(reason=result["reason"], output_tokens=result["count"], cached_tokens=result["cached"])
        finally:
            stop.set()
