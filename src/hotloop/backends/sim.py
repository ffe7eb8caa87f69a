"""`hotloop-sim`: a deterministic simulated model for tests and benchmarks (docs/models.md).

Same seed + same prompt tokens → same output. Pacing: `ttft_ms` before the first token, then `tps` tokens per
second. Tool policy: with tools offered and fewer than K calls in the conversation, call a declared tool with
arguments built from its JSON schema; otherwise answer with text. Per-request overrides through `metadata`:
`sim_ttft_ms`, `sim_tps`, `sim_output_tokens`, `sim_tool_calls`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from array import array
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from hotloop.backends.base import (
    Delta,
    Finished,
    GenerationRequest,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
)

_WORDS = [
    "the",
    "loop",
    "runs",
    "each",
    "tool",
    "and",
    "sends",
    "its",
    "output",
    "back",
    "so",
    "the",
    "model",
    "can",
    "pick",
    "the",
    "next",
    "step",
    "while",
    "hotloop",
    "keeps",
    "the",
    "conversation",
    "state",
    "warm",
    "on",
    "the",
    "socket",
    "and",
    "only",
    "new",
    "input",
    "is",
    "processed",
    "per",
    "turn",
]
# How many recent token sequences the simulated prefix cache remembers.
PREFIX_CACHE_ENTRIES = 64


class SimSettings(msgspec.Struct, frozen=True):
    ttft_ms: float = 20.0
    tps: float = 1000.0
    output_tokens: int = 32
    tool_calls: int = 2
    parallel_calls: int = 1
    seed: int = 0


class SimBackend:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._recent: deque[list[int]] = deque(maxlen=PREFIX_CACHE_ENTRIES)

    def _cached_prefix(self, tokens: list[int]) -> int:
        """Longest prefix shared with a recent prompt: what a prefix-caching engine would not recompute.

        The simulator remembers prompts only (its output pieces are not real tokens), so a continuation's
        cached tokens are its parent's prompt, as with an engine that caches prompts but not outputs.
        """
        best = 0
        for seen in self._recent:
            limit = min(len(seen), len(tokens))
            if limit <= best:
                continue
            n = 0
            while n < limit and seen[n] == tokens[n]:
                n += 1
            best = max(best, n)
        return best

    def _remember(self, tokens: list[int]) -> None:
        self._recent.append(tokens)

    async def prefill(self, prompt_tokens: list[int]) -> int:
        cached = self._cached_prefix(prompt_tokens)
        self._remember(list(prompt_tokens))
        return cached

    async def close(self) -> None:
        self._recent.clear()

    def _option(self, request: GenerationRequest, name: str, default: float) -> float:
        raw = request.metadata.get(f"sim_{name}")
        try:
            return float(raw) if raw is not None else default
        except ValueError:
            return default

    def _rng(self, request: GenerationRequest) -> random.Random:
        digest = hashlib.blake2b(array("q", request.prompt_tokens).tobytes(), digest_size=8)
        digest.update(str(self.settings.seed).encode())
        return random.Random(int.from_bytes(digest.digest(), "little"))

    def _plan(self, request: GenerationRequest, rng: random.Random) -> list[tuple[ToolSpec | None, list[str]]]:
        """What to emit: tool calls (spec, argument pieces) or one text answer (None, words)."""
        k = int(self._option(request, "tool_calls", self.settings.tool_calls))
        wants_tool = request.tools and request.tool_choice != "none"
        if wants_tool and (request.tool_choice == "required" or request.calls_so_far < k):
            count = max(1, self.settings.parallel_calls) if request.parallel_tool_calls else 1
            if request.forced_tool is not None:
                forced = [spec for spec in request.tools if spec.name == request.forced_tool]
                chosen = forced * count
            else:
                chosen = [rng.choice(request.tools) for _ in range(count)]
            return [(spec, _pieces(_call_payload(spec, rng))) for spec in chosen]
        n = max(1, int(self._option(request, "output_tokens", self.settings.output_tokens)))
        fmt = request.text_format.get("type")
        if fmt in ("json_object", "json_schema"):
            schema = request.text_format.get("schema") if fmt == "json_schema" else None
            if not isinstance(schema, dict):
                schema = {"type": "object"}
            return [(None, _pieces(json.dumps(example_for_schema(schema, rng))))]
        words = [rng.choice(_WORDS) for _ in range(n)]
        return [(None, [words[0].capitalize()] + [" " + word for word in words[1:-1]] + [" " + words[-1] + "."])]

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        cached = self._cached_prefix(request.prompt_tokens)
        ttft = self._option(request, "ttft_ms", self.settings.ttft_ms) / 1000.0
        tps = max(1e-3, self._option(request, "tps", self.settings.tps))
        limit = request.max_output_tokens
        rng = self._rng(request)
        start = time.perf_counter() + ttft
        emitted = 0
        for spec, pieces in self._plan(request, rng):
            if spec is not None:
                yield ToolCallStart(name=spec.name, kind=spec.kind, namespace=spec.namespace)
            for piece in pieces:
                if limit is not None and emitted >= limit:
                    self._remember(request.prompt_tokens)
                    yield Finished(reason="length", output_tokens=emitted, cached_tokens=cached)
                    return
                delay = start + emitted / tps - time.perf_counter()
                if delay > 0.0005:
                    await asyncio.sleep(delay)
                emitted += 1
                yield ToolCallDelta(text=piece) if spec is not None else TextDelta(text=piece)
            if spec is not None:
                yield ToolCallEnd()
        self._remember(request.prompt_tokens)
        yield Finished(reason="stop", output_tokens=emitted, cached_tokens=cached)


def _pieces(text: str, size: int = 4) -> list[str]:
    """Split text into token-sized pieces (the simulator's output tokens)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _call_payload(spec: ToolSpec, rng: random.Random) -> str:
    if spec.kind == "custom":
        return f"simulated input for {spec.name}"
    return json.dumps(example_for_schema(spec.parameters or {"type": "object", "properties": {}}, rng))


def example_for_schema(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A value valid against a (practical subset of) JSON Schema: types, enum, const, required, nesting."""
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_for_schema(schema[key][0], rng, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if depth > 6:
        kind = "null" if kind in ("object", "array") else kind
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: example_for_schema(sub, rng, depth + 1) for name, sub in props.items() if isinstance(sub, dict)}
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            items = {"type": "string"}
        return [example_for_schema(items, rng, depth + 1) for _ in range(max(1, int(schema.get("minItems", 1))))]
    if kind == "integer":
        floor = int(schema.get("minimum", 0))
        return rng.randint(floor, int(schema.get("maximum", floor + 100)))
    if kind == "number":
        low = float(schema.get("minimum", 0))
        return round(rng.uniform(low, float(schema.get("maximum", low + 100))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return f"{rng.choice(_WORDS)}-{rng.randint(0, 999)}"
