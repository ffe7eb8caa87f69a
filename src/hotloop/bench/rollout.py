"""One scripted client-run rollout of the agent-loop scenario over a mode's client, timed per turn against the
model's time (the agent loop's modes, the load scenario and the floor's recording run it)."""

from __future__ import annotations

import time
import uuid

from hotloop import clock
from hotloop.bench.agent_config import AgentLoopConfig
from hotloop.bench.agent_records import RunRecord, TurnRecord
from hotloop.bench.clients import BenchError, ModeClient
from hotloop.bench.progress import Progress
from hotloop.bench.scenario import CLIENT_CALLS, USER_TASK, Rollout, user_message


def model_ms(ttft_ms: float, tps: float, output_tokens: int, generations: int = 1) -> float:
    """When the simulator's last token is due: the first at ttft, token n (0-based) at ttft + n / tps; a response
    of several generations (a server-run tool search, then the call) pays each one's ttft."""
    return generations * ttft_ms + max(0, output_tokens - generations) / tps * 1000.0


def turn_model_ms(
    config: AgentLoopConfig, input_tokens: int, cached_tokens: int, output_tokens: int, generations: int = 1
) -> float:
    """The model's time for one turn: the simulator's fixed ttft, or an upstream engine's prefill of what its
    prefix cache did not hold, then decode."""
    if config.upstream is None:
        return model_ms(config.ttft_ms, config.tps, output_tokens, generations)
    prefill = max(0, input_tokens - cached_tokens) * config.prefill_us_per_token / 1000.0
    return prefill + max(0, output_tokens - generations) / config.tps * 1000.0


async def run_rollout(
    client: ModeClient,
    rollout: Rollout,
    config: AgentLoopConfig,
    run: int,
    progress: Progress,
    name: str | None = None,
) -> RunRecord:
    """One scripted rollout: every turn but the last calls a tool, the client runs it (sleeps) and answers; `name`
    labels it (the client's mode if None)."""
    name = name or client.mode
    record = RunRecord(mode=name, run=run, e2e_ms=0.0, physical_ms=0.0)
    items = rollout.first_input()
    if config.upstream is not None or config.compact_threshold is not None:
        # A new session's own first message: the engine's prefix cache may hold the shared system prompt, not an
        # earlier run's conversation (every run replays the same texts); a long session reports its cache share.
        items = [user_message(f"Session {uuid.uuid4().hex[:12]}.\n{USER_TASK}")]
    first_context: int | None = None
    start = time.perf_counter()
    for turn in range(rollout.turns):
        progress.update(f"agent-loop run {run + 1}/{config.runs} {name:<10} turn {turn + 1}/{rollout.turns}")
        result = await client.turn(items)
        if result.status != "completed":
            raise BenchError(f"{name} turn {turn}: response {result.response_id} is {result.status}")
        calls = [item for item in result.output if item.get("type") in CLIENT_CALLS]
        # A server-run tool search: its output item, then a generation of its own (each item once per turn).
        searches = [item for item in result.output if item.get("type") == "tool_search_output"]
        compacted = bool(result.output) and result.output[0].get("type") == "compaction"
        generations = 1 + len(searches)
        own = turn_model_ms(config, result.input_tokens, result.cached_tokens, result.output_tokens, generations)
        if compacted and config.upstream is None:  # the summary is a generation of its own: its first token too
            own += config.ttft_ms
        engine = (result.timings or {}).get("engine")
        # The engine reported its own time: the real model time, not a model. (A response of several generations
        # on hotloop-sim, a tool search's, reports an `engine` of 0: none of them had an engine clock.)
        if isinstance(engine, int | float) and engine > 0:
            own = float(engine)
        entry = TurnRecord(
            turn=turn,
            context_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            ttft_ms=None if result.ttft_s is None else result.ttft_s * 1000.0,
            turn_ms=result.turn_s * 1000.0,
            model_ms=own,
            overhead_ms=result.turn_s * 1000.0 - own,
            tool_ms=0.0,
            timings=result.timings,
            cached_tokens=result.cached_tokens,
            compacted=compacted,
            searches=len(searches),
            loaded_tools=sum(len(item.get("tools") or ()) for item in searches),
        )
        record.turns.append(entry)
        if turn == rollout.turns - 1:
            break
        if not calls:
            raise BenchError(f"{name} turn {turn}: expected a tool call, got {result.output!r}"[:500])
        if first_context is None:
            first_context = result.input_tokens
        tool_start = time.perf_counter()  # the tool's time includes producing its output
        chars = rollout.output_chars(turn, first_context, result.input_tokens, result.output_tokens)
        call = calls[0]
        items = [rollout.tool_output(turn, call, chars)]
        entry.output_chars = chars
        entry.call = f"function_call:{call.get('name')}" if call["type"] == "function_call" else call["type"]
        await clock.until(tool_start + config.tool_ms / 1000.0)  # the tool's time exactly, as the limit counts it
        entry.tool_ms = (time.perf_counter() - tool_start) * 1000.0
    record.e2e_ms = (time.perf_counter() - start) * 1000.0
    record.physical_ms = sum(t.model_ms for t in record.turns) + config.tool_ms * (len(record.turns) - 1)
    return record
