"""The agent-loop scenario: scripted Codex-like rollouts per mode, timed per turn against the physical limit."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import BenchError, ModeClient, open_client
from hotloop.bench.progress import Progress
from hotloop.bench.scenario import INSTRUCTIONS, MODEL, TOOLS, USER_TASK, Rollout, sim_metadata, user_message
from hotloop.bench.stats import median, ratio

if TYPE_CHECKING:
    from hotloop.bench.mcp_tools import McpToolProcess


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
    # A long session (docs/benchmarks.md): compact past this many prompt tokens (`context_management`); the tool
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


@dataclass
class RunRecord:
    mode: str
    run: int
    e2e_ms: float
    physical_ms: float  # model time + nominal tool time: the floor
    turns: list[TurnRecord] = field(default_factory=list)
    mcp: dict[str, Any] | None = None  # mode `mcp`: the loop's steps as hotloop and the MCP server measured them


def model_ms(ttft_ms: float, tps: float, output_tokens: int) -> float:
    """When the simulator's last token is due: the first at ttft, token n (0-based) at ttft + n / tps."""
    return ttft_ms + max(0, output_tokens - 1) / tps * 1000.0


def turn_model_ms(config: AgentLoopConfig, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
    """The model's time for one turn: the simulator's fixed ttft, or an upstream engine's prefill of what its
    prefix cache did not hold, then decode."""
    if config.upstream is None:
        return model_ms(config.ttft_ms, config.tps, output_tokens)
    prefill = max(0, input_tokens - cached_tokens) * config.prefill_us_per_token / 1000.0
    return model_ms(prefill, config.tps, output_tokens)


def request_fields(config: AgentLoopConfig) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "model": config.model,
        "instructions": INSTRUCTIONS,
        "tools": TOOLS,
        "tool_choice": config.tool_choice,
        "parallel_tool_calls": False,
        "metadata": sim_metadata(config.ttft_ms, config.tps, config.turns - 1),
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


async def run_rollout(
    client: ModeClient, rollout: Rollout, config: AgentLoopConfig, run: int, progress: Progress
) -> RunRecord:
    """One scripted rollout: every turn but the last calls a tool, the client runs it (sleeps) and answers."""
    record = RunRecord(mode=client.mode, run=run, e2e_ms=0.0, physical_ms=0.0)
    items = rollout.first_input()
    if config.upstream is not None or config.compact_threshold is not None:
        # A new session's own first message: the engine's prefix cache may hold the shared system prompt, not an
        # earlier run's conversation (every run replays the same texts); a long session reports its cache share.
        items = [user_message(f"Session {uuid.uuid4().hex[:12]}.\n{USER_TASK}")]
    first_context: int | None = None
    start = time.perf_counter()
    for turn in range(rollout.turns):
        progress.update(f"agent-loop run {run + 1}/{config.runs} {client.mode:<10} turn {turn + 1}/{rollout.turns}")
        result = await client.turn(items)
        if result.status != "completed":
            raise BenchError(f"{client.mode} turn {turn}: response {result.response_id} is {result.status}")
        calls = [item for item in result.output if item.get("type") == "function_call"]
        compacted = bool(result.output) and result.output[0].get("type") == "compaction"
        own = turn_model_ms(config, result.input_tokens, result.cached_tokens, result.output_tokens)
        if compacted and config.upstream is None:  # the summary is a generation of its own: its first token too
            own += config.ttft_ms
        engine = (result.timings or {}).get("engine")
        if isinstance(engine, int | float):  # the engine reported its own time: the real model time, not a model
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
        )
        record.turns.append(entry)
        if turn == rollout.turns - 1:
            break
        if not calls:
            raise BenchError(f"{client.mode} turn {turn}: expected a function call, got {result.output!r}"[:500])
        if first_context is None:
            first_context = result.input_tokens
        tool_start = time.perf_counter()  # the tool's time includes producing its output
        chars = rollout.output_chars(turn, first_context, result.input_tokens, result.output_tokens)
        items = [rollout.tool_output(turn, calls[0]["call_id"], chars)]
        entry.output_chars = chars
        deadline = tool_start + config.tool_ms / 1000.0
        while (remaining := deadline - time.perf_counter()) > 0:  # uvloop's ms timers may wake a little early
            await asyncio.sleep(remaining)
        entry.tool_ms = (time.perf_counter() - tool_start) * 1000.0
    record.e2e_ms = (time.perf_counter() - start) * 1000.0
    record.physical_ms = sum(t.model_ms for t in record.turns) + config.tool_ms * (len(record.turns) - 1)
    return record


async def run_agent_loop(
    base_url: str,
    config: AgentLoopConfig,
    api_key: str | None = None,
    progress: Progress | None = None,
    mcp_server: McpToolProcess | None = None,
) -> dict[str, Any]:
    """All runs of all modes (interleaved run by run, so drift hits every mode alike); the JSON-ready result.
    Mode `mcp` (bench/mcp_loop.py) needs `mcp_server` and comes after `ws`, whose tool outputs it returns."""
    progress = progress or Progress(enabled=False)
    if "mcp" in config.modes and (mcp_server is None or "ws" not in config.modes[: config.modes.index("mcp")]):
        raise BenchError("mode mcp needs the MCP tool server and a ws rollout before it (its tool outputs)")
    cpt = await chars_per_token(base_url, api_key, config.model)
    fixed = config.compact_threshold is not None
    rollout = Rollout(turns=config.turns, context_tokens=config.context_tokens, chars_per_token=cpt, fixed=fixed)
    fields = request_fields(config)
    if config.warmup:
        # The measured runs' model, upstream and tool_choice (a real model answers in text under `auto`).
        warm = replace(config, turns=2, context_tokens=500, tool_ms=0.0, ttft_ms=0.0, runs=1)
        warm_rollout = Rollout(turns=2, context_tokens=500, chars_per_token=cpt)
        warm_runs: list[RunRecord] = []
        for mode in config.modes:
            warm_runs.append(
                await _one_run(
                    mode,
                    base_url,
                    warm,
                    request_fields(warm),
                    warm_rollout,
                    0,
                    warm_runs,
                    progress,
                    api_key,
                    mcp_server,
                )
            )
    runs: list[RunRecord] = []
    for run in range(config.runs):
        for mode in config.modes:
            record = await _one_run(mode, base_url, config, fields, rollout, run, runs, progress, api_key, mcp_server)
            runs.append(record)
            progress.update(
                f"agent-loop run {run + 1}/{config.runs} {mode:<10} e2e {record.e2e_ms / 1000:.2f} s "
                f"(physical limit {record.physical_ms / 1000:.2f} s)",
                final=True,
            )
    progress.done()
    return summarize(config, cpt, runs)


async def _one_run(
    mode: str,
    base_url: str,
    config: AgentLoopConfig,
    fields: dict[str, Any],
    rollout: Rollout,
    run: int,
    earlier: list[RunRecord],
    progress: Progress,
    api_key: str | None,
    mcp_server: McpToolProcess | None,
) -> RunRecord:
    if mode == "mcp":
        from hotloop.bench.mcp_loop import run_mcp_rollout

        assert mcp_server is not None
        ws = next(r for r in reversed(earlier) if r.mode == "ws" and r.run == run)  # this run's client-run rollout
        sizes = [t.output_chars for t in ws.turns[:-1]]
        return await run_mcp_rollout(base_url, mcp_server, rollout, config, sizes, run, progress, api_key)
    client = await open_client(mode, base_url, fields, api_key)
    try:
        return await run_rollout(client, rollout, config, run, progress)
    finally:
        await client.close()


def _long_session(runs: list[RunRecord]) -> dict[str, Any]:
    """What compaction costs (docs/benchmarks.md): the compacting turns' overhead beside the others', and how much
    of the next turn's prompt the model's cache already held."""
    turns = [t for r in runs for t in r.turns]
    compacting = [t for t in turns if t.compacted]
    if not compacting:
        return {}
    after = [r.turns[i + 1] for r in runs for i, t in enumerate(r.turns[:-1]) if t.compacted]
    return {
        "compactions": median(sum(t.compacted for t in r.turns) for r in runs),
        "overhead_compacting_turn_ms": median(t.overhead_ms for t in compacting),
        "overhead_other_turns_ms": median(t.overhead_ms for t in turns if not t.compacted),
        "cached_ratio_after_compaction": median(t.cached_tokens / max(1, t.context_tokens) for t in after)
        if after
        else None,
        "context_max_tokens": max(t.context_tokens for t in turns if not t.compacted),
    }


def summarize(config: AgentLoopConfig, cpt: float, runs: list[RunRecord]) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode in config.modes:
        mine = [r for r in runs if r.mode == mode]
        if mode == "mcp":
            from hotloop.bench.mcp_loop import mcp_summary

            modes[mode] = mcp_summary(config, mine)
            continue
        turns = min(len(r.turns) for r in mine)
        per_turn = []
        for index in range(turns):
            rows = [r.turns[index] for r in mine]
            ttfts = [t.ttft_ms for t in rows if t.ttft_ms is not None]
            per_turn.append(
                {
                    "turn": index,
                    "context_tokens": int(median(t.context_tokens for t in rows)),
                    "cached_tokens": int(median(t.cached_tokens for t in rows)),
                    "cached_ratio": median(t.cached_tokens / max(1, t.context_tokens) for t in rows),
                    "output_tokens": int(median(t.output_tokens for t in rows)),
                    "ttft_ms": median(ttfts) if ttfts else None,
                    "turn_ms": median(t.turn_ms for t in rows),
                    "model_ms": median(t.model_ms for t in rows),
                    "overhead_ms": median(t.overhead_ms for t in rows),
                }
            )
        e2e = median(r.e2e_ms for r in mine)
        physical = median(r.physical_ms for r in mine)
        # The same floor with each tool's time as the client spent it (its output built, its timer's lateness):
        # what the server cannot shorten either.
        measured = median(sum(t.model_ms + t.tool_ms for t in r.turns) for r in mine)
        all_turns = [t for r in mine for t in r.turns]
        modes[mode] = {
            "runs": [asdict(r) for r in mine],
            "per_turn_median": per_turn,
            "median": {
                "e2e_ms": e2e,
                "physical_ms": physical,
                "e2e_over_physical": ratio(e2e, physical),
                "e2e_over_measured_tools": ratio(e2e, measured),
                "excess_ms": e2e - physical,
                "excess_per_step_ms": (e2e - physical) / max(1, turns - 1),
                "turns_completed": min(len(r.turns) for r in mine),
                "ttft_ms": median(t.ttft_ms for t in all_turns if t.ttft_ms is not None),
                "overhead_ms": median(t.overhead_ms for t in all_turns),
                "overhead_first_turn_ms": per_turn[0]["overhead_ms"],
                "overhead_last_turn_ms": per_turn[-1]["overhead_ms"],
                "context_last_turn_tokens": per_turn[-1]["context_tokens"],
                "tool_ms_total": median(sum(t.tool_ms for t in r.turns) for r in mine),
                **_long_session(mine),
            },
        }
    ratios: dict[str, float] = {}
    for other in ("http-full", "http-chain"):
        if "ws" in modes and other in modes:
            ws, them = modes["ws"]["median"], modes[other]["median"]
            ratios[f"e2e ws/{other}"] = ratio(ws["e2e_ms"], them["e2e_ms"])
            ratios[f"overhead ws/{other}"] = ratio(ws["overhead_ms"], them["overhead_ms"])
    if "mcp" in modes and "ws" in modes:
        ratios["e2e mcp/ws"] = ratio(modes["mcp"]["median"]["e2e_ms"], modes["ws"]["median"]["e2e_ms"])
    for mode, data in modes.items():
        ratios[f"e2e {mode}/physical"] = data["median"]["e2e_over_physical"]
        if "e2e_over_measured_tools" in data["median"]:  # the client's tools (not mcp mode's, inside the server)
            ratios[f"e2e {mode}/(model + measured tools)"] = data["median"]["e2e_over_measured_tools"]
    return {
        "scenario": "agent-loop",
        "config": {**asdict(config), "modes": list(config.modes), "chars_per_token": cpt},
        "modes": modes,
        "ratios": ratios,
    }
