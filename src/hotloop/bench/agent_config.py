"""The agent-loop scenario's settings, and what every request of one of its rollouts carries (shared by the
client-run rollout, the load scenario and mode `mcp`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hotloop.bench.clients import MODES
from hotloop.bench.scenario import INSTRUCTIONS, MODEL, sim_metadata, tool_set

# The agent loop's modes: the client-run ones (a response per turn), and `inject` (bench/inject_loop.py: the ws
# loop as one multi-agent response, after `ws`, whose tool outputs it sends).
AGENT_MODES = (*MODES, "inject")


@dataclass(frozen=True)
class AgentLoopConfig:
    turns: int
    context_tokens: int
    tps: float
    tool_ms: float
    ttft_ms: float = 20.0
    # A reasoning model: tokens of thinking before each call and the answer (hotloop-sim), model time like any
    # output token; its reasoning items are rendered back into the tool chain's prompts.
    reasoning_tokens: int = 0
    # A long session (docs/benchmarks-history.md): compact past this many prompt tokens (`context_management`); the tool
    # outputs then have a fixed size, so that the whole session holds `context_tokens` however often it compacts.
    compact_threshold: int | None = None
    modes: tuple[str, ...] = ("http-full", "http-chain", "ws")
    runs: int = 1
    warmup: bool = True
    model: str = MODEL
    # --upstream: hotloop in front of an engine. Its model time is prefill of the uncached prompt tokens at this
    # cost plus decode at `tps` (sim-engine's cost model); `ttft_ms` is then not used.
    upstream: str | None = None
    prefill_us_per_token: float = 0.0
    tool_choice: str = "auto"  # "required" for a real model that must call a tool every turn
    # A real model's sampling: a small model at temperature 1 can ramble inside a forced call until its budget ends.
    temperature: float | None = None
    max_output_tokens: int | None = None
    # --mcp: the tool also runs as an MCP server that hotloop calls itself, every step inside one response (mode
    # `mcp`, after `ws`, whose tool outputs it returns).
    mcp: bool = False
    mcp_json_response: bool = False  # the MCP server answers with JSON bodies, not event streams
    # --tools: the tool sets each mode runs with, side by side (scenario.TOOL_SETS): `function` (shell and
    # apply_patch as function tools) and `typed` (the typed `shell` and `apply_patch` tools; the mode's label
    # gets `+typed`).
    tools: tuple[str, ...] = ("function",)
    # --deferred: this many more function tools marked `defer_loading`, and a server-run `tool_search`: the
    # rollout's first model call is a search that loads some of them, inside the first turn's response.
    deferred: int = 0


def request_fields(config: AgentLoopConfig, tools: str | None = None) -> dict[str, Any]:
    """What every request of a rollout carries; `tools`: the tool set (the first of `config.tools` if None)."""
    # hotloop-sim's call budget counts the first turn's tool search as one of the context's calls.
    calls = config.turns - 1 + (1 if config.deferred else 0)
    fields: dict[str, Any] = {
        "model": config.model,
        "instructions": INSTRUCTIONS,
        "tools": tool_set(tools or config.tools[0], config.deferred),
        "tool_choice": config.tool_choice,
        "parallel_tool_calls": False,
        "metadata": sim_metadata(config.ttft_ms, config.tps, calls),
    }
    if config.reasoning_tokens:
        fields["metadata"]["sim_reasoning_tokens"] = str(config.reasoning_tokens)
    if config.compact_threshold is not None:
        fields["context_management"] = [{"type": "compaction", "compact_threshold": config.compact_threshold}]
    if config.temperature is not None:
        fields["temperature"] = config.temperature
    if config.max_output_tokens is not None:
        fields["max_output_tokens"] = config.max_output_tokens
    return fields
