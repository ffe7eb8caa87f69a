"""The engines' own token-ID APIs: SGLang's /generate and llama.cpp server's /completion chunks (their shapes, as
far as a client reads them). Generated text carries tool calls as `<tool_call>` blocks, as a model writes them."""

from __future__ import annotations

import time
from typing import Any

from hotloop.backends.base import Delta, Finished
from hotloop.simengine.writers import HermesText, TextWriter


class GenerateChunks:
    """SGLang: each chunk has the whole text so far and `meta_info` (counts; `finish_reason` on the last)."""

    def __init__(self, id: str, prompt_tokens: int, text: TextWriter | None = None) -> None:
        self.id = id
        self.prompt_tokens = prompt_tokens
        self.failed = False
        self.done_marker = True
        self.error_field = b"data"
        self._text = text or HermesText()
        self.text = ""
        self.pieces = 0

    def _chunk(self, finish: dict[str, Any] | None, finished: Finished | None = None) -> dict[str, Any]:
        meta = {
            "id": self.id,
            "finish_reason": finish,
            "prompt_tokens": finished.prompt_tokens if finished is not None else self.prompt_tokens,
            "completion_tokens": finished.output_tokens if finished is not None else self.pieces,
            "cached_tokens": finished.cached_tokens if finished is not None else 0,
        }
        return {"text": self.text, "meta_info": meta, "index": 0}

    def start(self) -> dict[str, Any] | None:
        return None

    def chunk(self, delta: Delta) -> dict[str, Any] | None:
        self.add(delta)
        return self._chunk(None)

    def finish(self, finished: Finished) -> dict[str, Any]:
        kind = "length" if finished.reason == "length" else "stop"
        return self._chunk({"type": kind}, finished)

    def usage(self, finished: Finished) -> dict[str, Any]:
        return self.finish(finished)  # not asked for by /generate: the last chunk carries the counts

    def collector(self) -> GenerateChunks:
        return self

    def add(self, delta: Delta) -> None:
        self.pieces += 1
        self.text += self._text(delta)

    def result(self, finished: Finished) -> dict[str, Any]:
        return self.finish(finished)


class LlamaCppChunks:
    """llama.cpp: `content` pieces, then a `stop: true` chunk with the counts and `timings`; no `[DONE]`."""

    def __init__(self, id_slot: int = 0, text: TextWriter | None = None) -> None:
        self.id_slot = id_slot
        self.failed = False
        self.done_marker = False
        self.error_field = b"error"  # llama.cpp's server: `error: {…}`
        self._text = text or HermesText()
        self.text: list[str] = []
        self.started = time.perf_counter()  # the engine's clock, as llama.cpp's `timings` measure it
        self.first: float | None = None

    def start(self) -> dict[str, Any] | None:
        return None

    def chunk(self, delta: Delta) -> dict[str, Any] | None:
        self.first = self.first or time.perf_counter()
        text = self._text(delta)
        return {"index": 0, "content": text, "stop": False, "id_slot": self.id_slot} if text else None

    def finish(self, finished: Finished) -> dict[str, Any]:
        return self._final("", finished)

    def _final(self, content: str, finished: Finished) -> dict[str, Any]:
        prompt = finished.prompt_tokens or 0
        now = time.perf_counter()
        first = self.first or now
        return {
            "index": 0,
            "content": content,
            "stop": True,
            "id_slot": self.id_slot,
            "stop_type": "limit" if finished.reason == "length" else "eos",
            "tokens_predicted": finished.output_tokens,
            "tokens_evaluated": prompt,
            "tokens_cached": finished.cached_tokens,
            "truncated": False,
            "timings": {
                "cache_n": finished.cached_tokens,
                "prompt_n": prompt - finished.cached_tokens,
                "predicted_n": finished.output_tokens,
                "prompt_ms": (first - self.started) * 1000,  # up to the first token
                "predicted_ms": (now - first) * 1000,
            },
        }

    def usage(self, finished: Finished) -> dict[str, Any]:
        return self.finish(finished)

    def collector(self) -> LlamaCppChunks:
        return self

    def add(self, delta: Delta) -> None:
        self.text.append(self._text(delta))

    def result(self, finished: Finished) -> dict[str, Any]:
        return self._final("".join(self.text), finished)
