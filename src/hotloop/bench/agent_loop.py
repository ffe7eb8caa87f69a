"""The agent-loop scenario: scripted Codex-like rollouts per mode, timed per turn against the physical limit. The
client-run rollouts are bench/rollout.py's, mode `mcp`'s bench/mcp_loop.py's, mode `inject`'s bench/inject_loop.py's;
this module runs them all and sums them up."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from hotloop.bench.agent_config import AgentLoopConfig, request_fields
from hotloop.bench.agent_records import RunRecord
from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import BenchError, open_client
from hotloop.bench.progress import Progress
from hotloop.bench.rollout import run_rollout
from hotloop.bench.scenario import USER_TASK, Rollout, tool_set, user_message
from hotloop.bench.stats import median, medians, ratio

if TYPE_CHECKING:
    from hotloop.bench.mcp_tools import McpToolProcess


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
    if "inject" in config.modes and "ws" not in config.modes[: config.modes.index("inject")]:
        raise BenchError("mode inject sends the ws rollout's tool outputs: --modes must list ws before it")
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
        from hotloop.bench.mcp_loop import run_mcp_rollout  # the MCP SDK loads only for mode mcp

        assert mcp_server is not None
        ws = next(r for r in reversed(earlier) if r.mode == "ws" and r.run == run)  # this run's client-run rollout
        sizes = [t.output_chars for t in ws.turns[:-1]]
        return await run_mcp_rollout(base_url, mcp_server, rollout, config, sizes, run, progress, api_key)
    if mode == "inject":
        from hotloop.bench.inject_loop import run_inject_rollout

        beside = "ws" + name[len(mode) :]  # ws with the same tool set
        ws = next(r for r in reversed(earlier) if r.mode == beside and r.run == run)
        return await run_inject_rollout(base_url, fields, rollout, config, ws, progress, name, api_key)
    client = await open_client(mode, base_url, fields, api_key)
    try:
        return await run_rollout(client, rollout, config, run, progress, name)
    finally:
        await client.close()


def _long_session(runs: list[RunRecord]) -> dict[str, Any]:
    """What compaction costs (docs/benchmarks-history.md): the compacting turns' overhead beside the others', and
    how much of the next turn's prompt the model's cache already held."""
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


def _to_first_output(config: AgentLoopConfig, runs: list[RunRecord]) -> float | None:
    """The median time from a tool step's request (a create, or an inject) to its first output, less hotloop-sim's
    ttft: hotloop's own time before the model writes. None through an engine (its prefill is in it)."""
    times = [t.ttft_ms - config.ttft_ms for r in runs for t in r.turns[1:] if t.ttft_ms is not None]
    return median(times) if times and config.upstream is None else None


def _inject_ratios(suffix: str, ws: dict[str, Any], inject: dict[str, Any]) -> dict[str, float]:
    """The loop as one multi-agent response beside the ws loop: e2e, overhead per turn (medians over every turn),
    per tool step (every turn but the first) and to a tool step's first output."""
    name = f"inject{suffix}/ws{suffix}"
    out = {
        f"e2e {name}": ratio(inject["e2e_ms"], ws["e2e_ms"]),
        f"overhead {name}": ratio(inject["overhead_ms"], ws["overhead_ms"]),
    }
    for key, what in (
        ("overhead_tool_steps_ms", "overhead per tool step"),
        ("to_first_output_overhead_ms", "to first output"),
    ):
        if inject.get(key) is not None and ws.get(key) is not None:
            out[f"{what} {name}"] = ratio(inject[key], ws[key])
    return out


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
                # The turns a tool's output started (all but the first): hotloop's own time per tool step, and its
                # part before the generation's first output (hotloop-sim's ttft taken off; not with an engine).
                "overhead_tool_steps_ms": median(t.overhead_ms for r in mine for t in r.turns[1:])
                if turns > 1
                else None,
                "to_first_output_overhead_ms": _to_first_output(config, mine),
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
        if mine[0].inject is not None:
            modes[mode]["median"]["inject"] = medians([r.inject or {} for r in mine])
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
    for suffix in ("", *(f"+{tools}" for tools in config.tools if tools != "function")):
        ws, inject = modes.get(f"ws{suffix}"), modes.get(f"inject{suffix}")
        if ws is not None and inject is not None:
            ratios.update(_inject_ratios(suffix, ws["median"], inject["median"]))
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
