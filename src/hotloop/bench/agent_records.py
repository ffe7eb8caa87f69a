"""What the agent-loop scenario records: each rollout's run and each of its turns, as timed (client-run modes and
modes `mcp` and `inject` alike)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TurnRecord:
    turn: int
    context_tokens: int  # usage.input_tokens
    output_tokens: int
    ttft_ms: float | None  # request handed to the socket → first output delta
    turn_ms: float  # request handed to the socket → terminal event
    # The model's time: the engine's own when it reports one (llama.cpp's server), else the modelled ttft + decode.
    model_ms: float
    overhead_ms: float  # turn_ms - model_ms: everything that is not model time
    tool_ms: float  # measured time of the tool that answered this turn's call (0 on the last turn)
    timings: dict[str, Any] | None = None  # the server's `hotloop:timing_metrics` event, as sent
    cached_tokens: int = 0  # prompt tokens the engine found in its prefix cache
    compacted: bool = False  # the turn compacted its context first (its output opens with a compaction item)
    output_chars: int = 0  # the size of the tool output that answered this turn's call (0 on the last turn)
    # The call the client answered: its item type (`shell_call`, `apply_patch_call`), `function_call:<name>`
    # for a function tool; "" on the last turn.
    call: str = ""
    searches: int = 0  # server-run tool searches inside the turn's response (each a generation of its own)
    loaded_tools: int = 0  # the tools those searches loaded


@dataclass
class RunRecord:
    mode: str
    run: int
    e2e_ms: float
    physical_ms: float  # model time + nominal tool time: the floor
    turns: list[TurnRecord] = field(default_factory=list)
    mcp: dict[str, Any] | None = None  # mode `mcp`: the loop's steps as hotloop and the MCP server measured them
    inject: dict[str, Any] | None = None  # mode `inject`: its one response, the injects' acknowledgements
