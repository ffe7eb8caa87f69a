"""The agent-loop scenario: scripted Codex-like rollouts per mode, timed per turn against the physical limit."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import BenchError, ModeClient, open_client
from hotloop.bench.progress import Progress
from hotloop.bench.scenario import (
    CLIENT_CALLS,
    INSTRUCTIONS,
    MODEL,
    USER_TASK,
    Rollout,
    sim_metadata,
    tool_set,
    user_message,
)
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
    # --tools: the tool sets each mode runs with, side by side (scenario.TOOL_SETS): `function` (shell and
    # apply_patch as function tools) and `typed` (the typed `shell` and `apply_patch` tools; the mode's label
    # gets `+typed`).
    tools: tuple[str, ...] = ("function",)
    # --deferred: this many more function tools marked `defer_loading`, and a server-run `tool_search`: the
    # rollout's first model call is a search that loads some of them, inside the first turn's response.
    deferred: int = 0


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


def label(mode: str, tools: str) -> str:
    """A mode's name in the results: `ws` with function tools, `ws+typed` with typed ones."""
    return mode if tools == "function" else f"{mode}+{tools}"


def rollouts(config: AgentLoopConfig) -> list[tuple[str, str, str]]:
    """(label, mode, tool set) of each rollout of a run, in the order they run: every tool set of a mode side by
    side; `mcp` (its own tools) once."""
    return [
        (label(mode, tools), mode, tools)
        for mode in config.modes
        for tools in (("function",) if mode == "mcp" else config.tools)
    ]


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
    fields = {tools: request_fields(config, tools) for tools in config.tools}
    if config.warmup:
        # The measured runs' model, upstream and tool_choice (a real model answers in text under `auto`).
        warm = replace(config, turns=2, context_tokens=500, tool_ms=0.0, ttft_ms=0.0, runs=1)
        warm_rollout = Rollout(turns=2, context_tokens=500, chars_per_token=cpt)
        warm_runs: list[RunRecord] = []
        for name, mode, tools in rollouts(config):
            warm_runs.append(
                await _one_run(
                    name,
                    mode,
                    base_url,
                    warm,
                    request_fields(warm, tools),
                    warm_rollout,
                    0,
                    warm_runs,
                    progress,
                    api_key,
                    mcp_server,
                )
            )
    saved = await prompt_savings(base_url, config, api_key) if config.deferred else None
    runs: list[RunRecord] = []
    for run in range(config.runs):
        for name, mode, tools in rollouts(config):
            record = await _one_run(
                name, mode, base_url, config, fields.get(tools, {}), rollout, run, runs, progress, api_key, mcp_server
            )
            runs.append(record)
            progress.update(
                f"agent-loop run {run + 1}/{config.runs} {name:<10} e2e {record.e2e_ms / 1000:.2f} s "
                f"(physical limit {record.physical_ms / 1000:.2f} s)",
                final=True,
            )
    progress.done()
    result = summarize(config, cpt, runs)
    if saved is not None:
        result["deferred"] = saved
    return result


async def prompt_savings(base_url: str, config: AgentLoopConfig, api_key: str | None = None) -> dict[str, Any]:
    """`--deferred N`: the first turn's prompt (usage.input_tokens) with the N tools deferred (and `tool_search`)
    beside the same N tools inline, one request each. The model answers in text (tool_choice `none`, which leaves
    every declared tool in the prompt), so that each is one generation's prompt: the loop's first turn sums two, the
    search's and the call's after it."""
    fields = request_fields(config)
    quiet = {
        "tool_choice": "none",
        "max_output_tokens": max(16, config.max_output_tokens or 16),
        "metadata": {**fields["metadata"], "sim_output_tokens": "1"},
    }
    first = [user_message(USER_TASK)]
    inline_tools = tool_set(config.tools[0], config.deferred, defer=False)
    deferred = await _one_turn(base_url, {**fields, **quiet}, first, api_key)
    inline = await _one_turn(base_url, {**fields, **quiet, "tools": inline_tools}, first, api_key)
    return {
        "tools": config.deferred,
        "tool_set": config.tools[0],
        "input_tokens_deferred": deferred,
        "input_tokens_inline": inline,
        "saved_tokens": inline - deferred,
        "saved_ratio": ratio(inline - deferred, inline),
    }


async def _one_turn(base_url: str, fields: dict[str, Any], items: list[dict[str, Any]], api_key: str | None) -> int:
    client = await open_client("http-full", base_url, fields, api_key)
    try:
        result = await client.turn(items)
    finally:
        await client.close()
    if result.status != "completed":
        raise BenchError(f"prompt size: response {result.response_id} is {result.status}")
    return result.input_tokens


async def _one_run(
    name: str,
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
        return await run_rollout(client, rollout, config, run, progress, name)
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
    for mode, _, _ in rollouts(config):
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
                "context_first_turn_tokens": per_turn[0]["context_tokens"],
                "context_last_turn_tokens": per_turn[-1]["context_tokens"],
                "tool_ms_total": median(sum(t.tool_ms for t in r.turns) for r in mine),
                "searches": median(sum(t.searches for t in r.turns) for r in mine),
                "loaded_tools": median(sum(t.loaded_tools for t in r.turns) for r in mine),
                **_long_session(mine),
            },
            # How often each call came, over all runs: `function_call:shell`, `shell_call`, `apply_patch_call`, ...
            "calls": dict(Counter(t.call for t in all_turns if t.call)),
        }
    ratios: dict[str, float] = {}
    for suffix in ("", *(f"+{tools}" for tools in config.tools if tools != "function")):
        for other in ("http-full", "http-chain"):
            ws, them = modes.get(f"ws{suffix}"), modes.get(f"{other}{suffix}")
            if ws is not None and them is not None:
                ratios[f"e2e ws{suffix}/{other}{suffix}"] = ratio(ws["median"]["e2e_ms"], them["median"]["e2e_ms"])
                ratios[f"overhead ws{suffix}/{other}{suffix}"] = ratio(
                    ws["median"]["overhead_ms"], them["median"]["overhead_ms"]
                )
    for mode in config.modes:  # a tool set beside the function tools, mode by mode (--tools function,typed)
        for tools in config.tools:
            beside = modes.get(label(mode, tools))
            if tools != "function" and mode in modes and beside is not None:
                base, theirs = modes[mode]["median"], beside["median"]
                ratios[f"overhead {mode}+{tools}/{mode}"] = ratio(theirs["overhead_ms"], base["overhead_ms"])
                ratios[f"e2e {mode}+{tools}/{mode}"] = ratio(theirs["e2e_ms"], base["e2e_ms"])
    if "mcp" in modes and "ws" in modes:
        ratios["e2e mcp/ws"] = ratio(modes["mcp"]["median"]["e2e_ms"], modes["ws"]["median"]["e2e_ms"])
    for mode, data in modes.items():
        ratios[f"e2e {mode}/physical"] = data["median"]["e2e_over_physical"]
        if "e2e_over_measured_tools" in data["median"]:  # the client's tools (not mcp mode's, inside the server)
            ratios[f"e2e {mode}/(model + measured tools)"] = data["median"]["e2e_over_measured_tools"]
    return {
        "scenario": "agent-loop",
        "config": {
            **asdict(config),
            "modes": list(config.modes),
            "tools": list(config.tools),
            "chars_per_token": cpt,
        },
        "modes": modes,
        "ratios": ratios,
    }
