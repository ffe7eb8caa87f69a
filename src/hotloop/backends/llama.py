"""`smollm2-135m`: SmolLM2-135M-Instruct run in-process by llama-cpp-python.

Generation runs on a worker thread (never on the event loop) and streams tokens through a queue; closing the
stream (client gone) stops the thread at the next token. llama.cpp keeps the previous prompt's KV cache, so a
continuation recomputes only the tokens past the longest common prefix, which is reported as `cached_tokens`.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import threading
from collections.abc import AsyncGenerator
from typing import Any

from hotloop.backends.base import Delta, Finished, GenerationRequest
from hotloop.backends.gguf import load_llama
from hotloop.backends.toolcalls import ToolCallParser

_END = object()
STOP_TEXTS = ("<|im_end|>", "<|endoftext|>")


class LlamaBackend:
    def __init__(self, n_ctx: int = 8192, n_threads: int | None = None, seed: int = 0) -> None:
        self.n_ctx = n_ctx
        self._llama: Any = load_llama(n_ctx=n_ctx, n_threads=n_threads or os.cpu_count() or 1, seed=seed)
        self._lock = threading.Lock()  # one llama.cpp context: one generation at a time
        self._stops = {self._llama.token_eos()}
        for text in STOP_TEXTS:
            ids = self._llama.tokenize(text.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                self._stops.add(ids[0])

    def _common_prefix(self, tokens: list[int]) -> int:
        """What llama.cpp will reuse from its KV cache: the shared prefix, always leaving one token to evaluate."""
        cached = 0
        for a, b in zip(self._llama._input_ids, tokens[:-1], strict=False):
            if a != b:
                break
            cached += 1
        return cached

    async def prefill(self, prompt_tokens: list[int]) -> int:
        def work() -> int:
            with self._lock:
                cached = self._common_prefix(prompt_tokens)
                self._llama.n_tokens = cached
                self._llama.eval(prompt_tokens[cached:])
                return cached

        return await asyncio.to_thread(work)

    async def close(self) -> None:
        with self._lock:
            self._llama.close()

    def _run(self, request: GenerationRequest, emit: Any, stop: threading.Event, result: dict[str, Any]) -> None:
        llama = self._llama
        tokens = request.prompt_tokens
        budget = self.n_ctx - len(tokens)
        if request.max_output_tokens is not None:
            budget = min(budget, request.max_output_tokens)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self._lock:
            result["cached"] = self._common_prefix(tokens)
            count = 0
            reason = "stop"
            if budget <= 0:
                reason = "length"
            else:
                for token in llama.generate(
                    tokens,
                    temp=request.temperature,
                    top_p=request.top_p,
                    presence_penalty=request.presence_penalty,
                    frequency_penalty=request.frequency_penalty,
                    reset=True,
                ):
                    if stop.is_set() or token in self._stops:
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

        def emit(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, text)

        def work() -> None:
            try:
                self._run(request, emit, stop, result)
            except BaseException as exc:  # handed to the consumer
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        thread = threading.Thread(target=work, name="hotloop-llama", daemon=True)
        thread.start()
        parser = ToolCallParser(request.tools, request.parallel_tool_calls)
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                for delta in parser.feed(item):
                    yield delta
            for delta in parser.finish():
                yield delta
            yield Finished(reason=result["reason"], output_tokens=result["count"], cached_tokens=result["cached"])
        finally:
            stop.set()
