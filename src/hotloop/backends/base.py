"""What a backend is: rendered prompt tokens in, a stream of typed deltas out (no I/O of ours).

A backend that takes messages (an upstream engine's chat API, `Model.takes_messages`) gets the conversation's
items and instructions instead of tokens; it is the only kind that reads wire items.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal, Protocol

import msgspec

from hotloop.chat.specs import ToolSpec
from hotloop.wire.items import ContextItem


class GenerationRequest(msgspec.Struct, kw_only=True):
    """Everything a backend needs for one response; built by the pipeline's render stage."""

    # A list, or the renderer's array("i"): handing over the array avoids a per-element copy of a long prompt.
    prompt_tokens: Sequence[int]
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    # Deferred tools not loaded yet (`defer_loading`): never rendered nor callable; hotloop-sim picks its
    # `tool_search` query from them, as a model would from its task.
    deferred: list[ToolSpec] = msgspec.field(default_factory=list)
    # "auto" | "none" | "required" | a tool name that must be called
    tool_choice: str = "auto"
    forced_tool: str | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    text_format: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "text"})
    # Function and custom tool calls already in the context (the simulator's tool policy reads it).
    calls_so_far: int = 0
    reasoning_effort: str | None = None  # the request's `reasoning.effort` (none … xhigh), for engines that take it
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    # For a backend that takes messages (prompt_tokens is then empty): the whole conversation, oldest first
    # (the chain's context, then this turn's new items), and the request's instructions.
    items: Sequence[ContextItem] = ()
    instructions: str | None = None
    # The chain's identity, for replica routing (backends/upstream/routing.py): this response, and the one it continues.
    response_id: str = ""
    previous_response_id: str | None = None
    # The agent generating, in a multi-agent response (`/root`, `/root/<task>`…; "" otherwise): hotloop-sim's
    # policy reads it, as a model reads its own instructions.
    agent: str = ""
    # The W3C trace context of this generation's span, for an engine that joins the trace (observability/tracing.py).
    traceparent: str | None = None


class TextDelta(msgspec.Struct):
    text: str


class ToolCallStart(msgspec.Struct):
    name: str
    kind: str = "function"  # the called ToolSpec's kind (a typed client tool's call is built by hotloop/tools/)
    namespace: str | None = None


class ReasoningDelta(msgspec.Struct):
    """A piece of the model's reasoning (an engine's `reasoning_content`, `reasoning` or `thinking`): it streams
    into a `reasoning` output item before the message or calls of the turn (protocol.md §2.6)."""

    text: str


class ToolCallDelta(msgspec.Struct):
    """A piece of the open call's `arguments` (function) or `input` (custom)."""

    text: str


class ToolCallEnd(msgspec.Struct):
    """The open call is written. `incomplete`: it was cut short (the length limit, a stop inside it) or does not
    parse; it then ends as a call item with `status: "incomplete"`, never as its syntax in a message (§2.5)."""

    incomplete: bool = False


class Finished(msgspec.Struct):
    """Always the last delta. `reason` "length" means `max_output_tokens` (or the context) stopped generation."""

    reason: Literal["stop", "length"]
    output_tokens: int
    cached_tokens: int
    # The prompt's size as the engine counted it; None: the rendered prompt tokens' count (a backend that takes
    # messages has no rendered tokens and reports the upstream's usage here).
    prompt_tokens: int | None = None
    # The engine's own time for the request (prompt processing + generation), when it reports one (llama.cpp's
    # server: `timings.prompt_ms + predicted_ms`): the real model time of the turn, for `hotloop bench`.
    engine_ms: float | None = None
    # Of `output_tokens`, those the engine counted as reasoning (`completion_tokens_details.reasoning_tokens`).
    reasoning_tokens: int = 0


Delta = TextDelta | ReasoningDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Finished
_PIECES = (TextDelta, ReasoningDelta, ToolCallDelta)


def coalesced(deltas: list[Delta]) -> list[Delta]:
    """Adjacent pieces of one kind (text, reasoning, call arguments) as one delta: what arrived together (one read
    of an engine's stream, the tokens a simulated model owes at once) costs one event and one frame downstream."""
    if len(deltas) < 2:
        return deltas
    out: list[Delta] = []
    for delta in deltas:
        last = out[-1] if out else None
        if type(delta) is type(last) and isinstance(delta, _PIECES) and isinstance(last, _PIECES):
            out[-1] = type(delta)(last.text + delta.text)
        else:
            out.append(delta)
    return out


class BackendError(Exception):
    """A backend failure with the code `response.failed` carries (protocol.md §2.9): `server_error`,
    `rate_limit_exceeded` or `context_length_exceeded`; the message says what the engine reported."""

    def __init__(self, message: str, code: str = "server_error") -> None:
        super().__init__(message)
        self.code = code


class Backend(Protocol):
    """A model engine. `generate` is cancelled (its iterator closed) when the client goes away."""

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        """Stream the response; the final delta is `Finished`."""
        ...

    async def prefill(self, prompt_tokens: Sequence[int]) -> int:
        """Warm the prefix cache with the prompt (`generate: false`); returns the prompt tokens already cached."""
        ...

    async def close(self) -> None: ...
