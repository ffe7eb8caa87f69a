"""`hotloop-sim`: a deterministic simulated model for tests and benchmarks (docs/models.md).

Same seed + same prompt tokens → same output. Pacing: `ttft_ms` before the first token, then `tps` tokens per
second. Tool policy: with tools offered and fewer than K calls in the conversation, call a declared tool with
arguments built from its JSON schema (a shell-like tool, one with a `cmd`/`command`/`commands` property, is
preferred and gets a real command: `shell_command`); otherwise answer with text. Per-request overrides through
`metadata`: `sim_ttft_ms`, `sim_tps`, `sim_output_tokens`, `sim_tool_calls`, `sim_reasoning_tokens` (thinking before
each answer or call: a reasoning item, counted in `reasoning_tokens`); and `hotloop_sim_fault`, a test facility
that makes the model fail: `stall_after:N` (hang after N output tokens), `die_after:N` (raise after N), `crash`
(raise before the first token). Unparsable overrides are ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
from array import array
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal

import msgspec

from hotloop.backends.base import (
    Delta,
    Finished,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.chat.specs import ToolSpec

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
# The output's seed covers the prompt's length and this many of its last tokens.
RNG_TAIL_TOKENS = 2048
_TOKEN = array("i").itemsize


FAULT_KEY = "hotloop_sim_fault"


class SimFault(Exception):
    """The failure `hotloop_sim_fault` asked for (a backend fault, as a crashing engine would raise)."""


def parse_fault(raw: object) -> tuple[str, int] | None:
    """`stall_after:N` / `die_after:N` / `crash` → (kind, tokens before it); anything else → None (ignored)."""
    if raw == "crash":
        return ("die", 0)
    if not isinstance(raw, str) or ":" not in raw:
        return None
    kind, _, count = raw.partition(":")
    if kind not in ("stall_after", "die_after") or not count.isdigit():
        return None
    return (kind.removesuffix("_after"), int(count))


class SimStats:
    """What the simulator's generations did: tests read it to see a generation stop (in-process servers)."""

    __slots__ = ("closed_at", "finished", "started", "stopped")

    def __init__(self) -> None:
        self.started = 0
        self.finished = 0  # ended with `Finished`
        self.stopped = 0  # closed early: cancelled, timed out or failed
        self.closed_at = 0.0  # time.perf_counter() when the last early stop happened


class SimSettings(msgspec.Struct, frozen=True):
    ttft_ms: float = 20.0
    tps: float = 1000.0
    output_tokens: int = 32
    tool_calls: int = 2
    parallel_calls: int = 1
    seed: int = 0
    reasoning_tokens: int = 0  # a reasoning model: this many tokens of thinking before each answer or call


REASONING = "reasoning"  # the plan's marker for the thinking that comes first


class SimBackend:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._recent: deque[bytes] = deque(maxlen=PREFIX_CACHE_ENTRIES)  # packed prompts, newest last
        self.stats = SimStats()

    def _cached_prefix(self, packed: bytes) -> int:
        """Longest prefix shared with a recent prompt: what a prefix-caching engine would not recompute.

        The simulator remembers prompts only (its output pieces are not real tokens), so a continuation's
        cached tokens are its parent's prompt, as with an engine that caches prompts but not outputs. Newest
        first: in an agent loop the parent's whole prompt is a prefix (one memcmp), and older, shorter prompts
        of the chain are then skipped without comparing.
        """
        best = 0
        for seen in reversed(self._recent):
            if len(seen) // _TOKEN <= best:
                continue
            whole = packed.startswith(seen)
            best = len(seen) // _TOKEN if whole else max(best, _shared_prefix(seen, packed, best))
        return best

    def _remember(self, packed: bytes) -> None:
        if packed in self._recent:
            self._recent.remove(packed)
        self._recent.append(packed)

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        packed = _pack(prompt_tokens)
        cached = self._cached_prefix(packed)
        self._remember(packed)
        return cached

    async def close(self) -> None:
        self._recent.clear()

    def _option(self, request: GenerationRequest, name: str, default: float) -> float:
        """A `metadata` override `sim_<name>`; unparsable, negative or non-finite values fall back to the setting."""
        raw = request.metadata.get(f"sim_{name}")
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            return default
        return value if math.isfinite(value) and value >= 0 else default

    def _rng(self, request: GenerationRequest, packed: bytes) -> random.Random:
        """Seeded by the seed, the prompt's length and its last tokens: deterministic per input, and O(1) in the
        history (hashing a 100k-token prompt every turn would be the simulator's own overhead, not the API's)."""
        digest = hashlib.blake2b(packed[-RNG_TAIL_TOKENS * _TOKEN :], digest_size=8)
        digest.update(f"{self.settings.seed}:{len(packed)}".encode())
        return random.Random(int.from_bytes(digest.digest(), "little"))

    def _plan(self, request: GenerationRequest, rng: random.Random) -> list[tuple[ToolSpec | str | None, list[str]]]:
        """What to emit: the reasoning first (REASONING, words) when the model thinks, then tool calls (spec,
        argument pieces) or one text answer (None, words)."""
        thinking = int(self._option(request, "reasoning_tokens", self.settings.reasoning_tokens))
        reasoning: list[tuple[ToolSpec | str | None, list[str]]] = []
        if thinking > 0:
            words = [rng.choice(_WORDS) for _ in range(thinking)]
            reasoning = [(REASONING, ["Let me think: " + words[0]] + [" " + word for word in words[1:]])]
        return reasoning + self._answer(request, rng)

    def _answer(self, request: GenerationRequest, rng: random.Random) -> list[tuple[ToolSpec | str | None, list[str]]]:
        """Tool calls (spec, argument pieces) or one text answer (None, words)."""
        k = int(self._option(request, "tool_calls", self.settings.tool_calls))
        wants_tool = request.tools and request.tool_choice != "none"
        if wants_tool and (request.tool_choice == "required" or request.calls_so_far < k):
            count = max(1, self.settings.parallel_calls) if request.parallel_tool_calls else 1
            forced = [spec for spec in request.tools if spec.name == request.forced_tool]
            # A shell-like tool, when one is offered, so that an agent's calls really run something.
            pool = [spec for spec in request.tools if command_field(spec) is not None] or request.tools
            chosen = forced[:1] * count if forced else [rng.choice(pool) for _ in range(count)]
            first = request.calls_so_far + 1
            return [(spec, _pieces(_call_payload(spec, rng, first + i))) for i, spec in enumerate(chosen)]
        n = max(1, int(self._option(request, "output_tokens", self.settings.output_tokens)))
        fmt = request.text_format.get("type")
        if fmt in ("json_object", "json_schema"):
            schema = request.text_format.get("schema") if fmt == "json_schema" else None
            if not isinstance(schema, dict):
                schema = {"type": "object"}
            return [(None, _pieces(json.dumps(example_for_schema(schema, rng))))]
        words = [rng.choice(_WORDS) for _ in range(n)]
        pieces = [words[0].capitalize()] + [" " + word for word in words[1:]]
        pieces[-1] += "."
        return [(None, pieces)]

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        self.stats.started += 1
        fault = parse_fault(request.metadata.get(FAULT_KEY))
        packed = _pack(request.prompt_tokens)
        cached = self._cached_prefix(packed)
        ttft = self._option(request, "ttft_ms", self.settings.ttft_ms) / 1000.0
        tps = max(1e-3, self._option(request, "tps", self.settings.tps))
        limit = request.max_output_tokens
        rng = self._rng(request, packed)
        start = time.perf_counter() + ttft
        emitted = thought = 0
        reason: Literal["stop", "length"] = "stop"
        try:
            if fault is not None and fault[1] == 0:
                await _fail(fault[0])
            for spec, pieces in self._plan(request, rng):
                if isinstance(spec, ToolSpec):
                    yield ToolCallStart(name=spec.name, kind=spec.kind, namespace=spec.namespace)
                for piece in pieces:
                    if limit is not None and emitted >= limit:
                        reason = "length"
                        break
                    if fault is not None and emitted == fault[1]:
                        await _fail(fault[0])
                    delay = start + emitted / tps - time.perf_counter()
                    if delay > 0.0005:
                        await asyncio.sleep(delay)
                    emitted += 1
                    if spec == REASONING:
                        thought += 1
                        yield ReasoningDelta(text=piece)
                    else:
                        yield ToolCallDelta(text=piece) if spec is not None else TextDelta(text=piece)
                if reason == "length":
                    break
                if isinstance(spec, ToolSpec):
                    yield ToolCallEnd()
        except BaseException:  # cancelled (the client went away, a timeout), closed, or the fault above
            self.stats.stopped += 1
            self.stats.closed_at = time.perf_counter()
            raise
        self._remember(packed)
        self.stats.finished += 1
        yield Finished(reason=reason, output_tokens=emitted, cached_tokens=cached, reasoning_tokens=thought)


async def _fail(kind: str) -> None:
    if kind == "stall":
        await asyncio.Event().wait()  # never set: only a timeout or a cancellation ends it
    raise SimFault("simulated backend failure (hotloop_sim_fault)")


def _pack(tokens: Sequence[int]) -> bytes:
    """Token ids as bytes (4 per token): a memcpy for the renderer's array("i"), a conversion for a list."""
    return tokens.tobytes() if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens).tobytes()


def _shared_prefix(a: bytes, b: bytes, at_least: int) -> int:
    """Tokens two packed prompts share from the start; 0 when not more than `at_least` (binary search on memcmp)."""
    size = _TOKEN
    limit = min(len(a), len(b)) // size
    view = memoryview(a)
    if limit <= at_least or not b.startswith(view[: (at_least + 1) * size]):
        return 0
    low, high = at_least + 1, limit  # invariant: the first `low` tokens match
    while low < high:
        mid = (low + high + 1) // 2
        if b.startswith(view[: mid * size]):
            low = mid
        else:
            high = mid - 1
    return low


def _pieces(text: str, size: int = 4) -> list[str]:
    """Split text into token-sized pieces (the simulator's output tokens)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _call_payload(spec: ToolSpec, rng: random.Random, number: int) -> str:
    """A call's arguments; `number` counts the calls of the conversation (1-based) and names a shell call's marker."""
    if spec.kind == "custom":
        return f"simulated input for {spec.name}"
    field = command_field(spec)
    if field is not None and spec.parameters is not None:
        return json.dumps(_shell_arguments(spec.parameters, field, number, rng))
    return json.dumps(example_for_schema(spec.parameters or {"type": "object", "properties": {}}, rng))


# Properties a shell-like function tool runs: a command line (string), an argv (`command`/`cmd` as an array) or
# several command lines (`commands`), in this order of preference.
COMMAND_FIELDS = ("cmd", "command", "commands")
# Required directory properties of a shell tool get the working directory, where a random word would fail the call.
_WORKDIR_FIELDS = ("workdir", "cwd", "working_directory")


def command_field(spec: ToolSpec) -> str | None:
    """The property that makes a function tool shell-like (a string or an array of strings named as a command)."""
    properties = (spec.parameters or {}).get("properties") if spec.kind == "function" else None
    if not isinstance(properties, dict):
        return None
    for name in COMMAND_FIELDS:
        schema = properties.get(name)
        if isinstance(schema, dict) and (_is_type(schema, "string") or _is_string_array(schema)):
            return name
    return None


def shell_command(number: int) -> str:
    """A harmless POSIX command line that proves it ran: it prints `hotloop-sim-<n>` (a text the command line itself
    does not contain) and writes it to `hotloop_sim_<n>.txt` in the working directory."""
    return f"printf 'hotloop-sim-%d\\n' {number} | tee hotloop_sim_{number}.txt"


def _shell_arguments(schema: dict[str, Any], field: str, number: int, rng: random.Random) -> dict[str, Any]:
    """The command plus the other *required* properties: optional ones (a shell binary, a sandbox override, a
    login flag) are left to the tool's defaults, as a model would, since random values for them break the run."""
    properties: dict[str, Any] = schema["properties"]
    required = schema.get("required")
    names = [name for name in properties if isinstance(required, list) and name in required and name != field]
    line = shell_command(number)
    if _is_type(properties[field], "string"):
        arguments: dict[str, Any] = {field: line}
    else:
        arguments = {field: [line] if field == "commands" else ["sh", "-c", line]}
    for name in names:
        sub = properties[name]
        if isinstance(sub, dict):
            fixed = name in _WORKDIR_FIELDS and _is_type(sub, "string")
            arguments[name] = "." if fixed else example_for_schema(sub, rng, 1, schema)
    return arguments


def _is_type(schema: dict[str, Any], kind: str) -> bool:
    declared = schema.get("type")
    return declared == kind or (isinstance(declared, list) and kind in declared)


def _is_string_array(schema: dict[str, Any]) -> bool:
    items = schema.get("items")
    return _is_type(schema, "array") and isinstance(items, dict) and _is_type(items, "string")


def example_for_schema(
    schema: dict[str, Any], rng: random.Random, depth: int = 0, root: dict[str, Any] | None = None
) -> Any:
    """A value valid against a practical subset of JSON Schema.

    Handled: type (or a list of types), enum, const, local `$ref` (`#/$defs/…`), anyOf/oneOf (first branch),
    allOf (merged), object properties (all generated, so `required` holds), array items with minItems/maxItems,
    integer/number minimum/maximum (also exclusive), string minLength/maxLength and common formats.
    """
    root = schema if root is None else root
    if depth > 32:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve_ref(root, ref)
        if target is not None:
            rest = {key: value for key, value in schema.items() if key != "$ref"}
            return example_for_schema({**target, **rest}, rng, depth + 1, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and isinstance(branches[0], dict):
            rest = {name: value for name, value in schema.items() if name != key}
            return example_for_schema({**rest, **branches[0]}, rng, depth + 1, root)
    if isinstance(schema.get("allOf"), list):
        merged = {name: value for name, value in schema.items() if name != "allOf"}
        for branch in schema["allOf"]:
            if isinstance(branch, dict):
                props = {**merged.get("properties", {}), **branch.get("properties", {})}
                merged = {**merged, **branch, "properties": props}
        return example_for_schema(merged, rng, depth + 1, root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if depth > 8 and kind in ("object", "array") and _nullable(schema):
        return None  # a recursive schema: stop where the schema allows it
    if kind == "object":
        props = schema.get("properties") or {}
        return {
            name: example_for_schema(sub, rng, depth + 1, root) for name, sub in props.items() if isinstance(sub, dict)
        }
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            items = {"type": "string"}
        count = max(1, int(schema.get("minItems", 1)))
        if "maxItems" in schema:
            count = max(0, min(count, int(schema["maxItems"])))
        return [example_for_schema(items, rng, depth + 1, root) for _ in range(count)]
    if kind == "integer":
        floor, ceiling = _bounds(schema, integer=True)
        return rng.randint(int(floor), int(ceiling))
    if kind == "number":
        low, high = _bounds(schema, integer=False)
        # A whole number when the range holds one: still a valid JSON-schema "number", and what clients that
        # declare "number" but parse an integer (Codex's `max_output_tokens`, `yield_time_ms`) accept.
        if math.ceil(low) <= math.floor(high):
            return rng.randint(math.ceil(low), math.floor(high))
        value = round(rng.uniform(low, high), 2)
        return value if low <= value <= high else low
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng)


def _resolve_ref(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """A local JSON pointer (`#`, `#/$defs/Name`, `#/definitions/Name`); remote references are not followed."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for token in filter(None, ref[1:].split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or token not in node:
            return None
        node = node[token]
    return node if isinstance(node, dict) else None


def _nullable(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return isinstance(kind, list) and "null" in kind


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
    """The inclusive range a number must fall in; without bounds, [0, 100] (shifted to meet a lone bound)."""
    step = 1.0 if integer else 0.01
    low: float | None = None
    high: float | None = None
    if isinstance(schema.get("minimum"), int | float):
        low = float(schema["minimum"])
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        bound = float(schema["exclusiveMinimum"]) + step
        low = bound if low is None else max(low, bound)
    if isinstance(schema.get("maximum"), int | float):
        high = float(schema["maximum"])
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        bound = float(schema["exclusiveMaximum"]) - step
        high = bound if high is None else min(high, bound)
    if low is None:
        low = 0.0 if high is None or high >= 0 else high - 100
    if high is None:
        high = low + 100
    if integer:
        low, high = float(math.ceil(low)), float(math.floor(high))
    return low, max(low, high)


_FORMATS = {
    "date-time": "2025-01-02T03:04:05Z",
    "date": "2025-01-02",
    "time": "03:04:05Z",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    text = _FORMATS.get(str(schema.get("format")), f"{rng.choice(_WORDS)}-{rng.randint(0, 999)}")
    low = int(schema.get("minLength", 0))
    high = int(schema.get("maxLength", max(low, len(text))))
    if len(text) < low:
        text += "x" * (low - len(text))
    return text[: max(low, high)]
