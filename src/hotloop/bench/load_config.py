"""The load scenario's settings and what every request of one of its sessions carries (shared by the load run and
the floor's recording)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hotloop.bench.agent_config import AgentLoopConfig, request_fields


@dataclass(frozen=True)
class LoadConfig:
    connections: int = 200
    turns: int = 20
    tps: float = 1000.0
    ttft_ms: float = 20.0
    tool_ms: float = 50.0
    context_tokens: int = 10_000
    ramp_s: float = 1.0
    rollouts: int = 1  # rollouts per connection, one after another (more turns for the percentiles)
    store: bool = False
    turn_timeout_s: float = 60.0
    idle_s: float = 2.0  # the server's CPU is first measured this long with no traffic (0: not measured)
    # --upstream: the agent-loop fields that put an upstream engine in hotloop-sim's place (model, upstream, ...).
    upstream: dict[str, Any] = field(default_factory=dict)


def loop_config(config: LoadConfig) -> AgentLoopConfig:
    return AgentLoopConfig(
        turns=config.turns,
        context_tokens=config.context_tokens,
        tps=config.tps,
        tool_ms=config.tool_ms,
        ttft_ms=config.ttft_ms,
        modes=("ws",),
        **config.upstream,
    )


def session_fields(config: LoadConfig) -> dict[str, Any]:
    """The fields every request of a session carries (model, instructions, tools, pacing, store)."""
    return {**request_fields(loop_config(config)), "store": config.store}
