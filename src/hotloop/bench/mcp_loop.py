"""The agent loop in the server (`hotloop bench agent-loop --mcp`, mode `mcp`): the scenario's tool is an MCP server
(bench/mcp_tools.py) and one create makes every call inside its response: hotloop-sim calls the MCP tool
`turns - 1` times, hotloop runs each call and generates again on the extended prompt, then the model answers. The
tool outputs are those the client-run `ws` rollout of the same run sent, so the context grows the same way.

After the loop, one continuation on the same WebSocket (`previous_response_id`, the same tools, a short message;
the model answers) shows what a cached tool list costs a turn: its `mcp_list` stage, and no `tools/list` request
reaching the MCP server.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import httpx

from hotloop.bench.agent_config import AgentLoopConfig, request_fields
from hotloop.bench.agent_records import RunRecord, TurnRecord
from hotloop.bench.clients import BenchError, open_client
from hotloop.bench.mcp_tools import LABEL
from hotloop.bench.scenario import Rollout, user_message
from hotloop.bench.stats import median, medians, ratio

if TYPE_CHECKING:
    from hotloop.bench.mcp_tools import McpToolProcess
    from hotloop.bench.progress import Progress

CONTINUATION = "Thanks. Is anything else left to do?"


def mcp_fields(config: AgentLoopConfig, url: str) -> dict[str, Any]:
    """The client-run rollout's request with the MCP server in place of its function tools."""
    fields = request_fields(config)
    fields["tools"] = [{"type": "mcp", "server_label": LABEL, "server_url": url, "require_approval": "never"}]
    steps = config.turns - 1
    if steps > 0:  # the scripted steps bound the response's calls, whatever the server's default bound is
        fields["max_tool_calls"] = steps
    return fields


async def _control(server: McpToolProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.request(method, server.control_url + path, json=body)
        reply.raise_for_status()
        return reply.json()


async def run_mcp_rollout(
    base_url: str,
    server: McpToolProcess,
    rollout: Rollout,
    config: AgentLoopConfig,
    sizes: list[int],
    run: int,
    progress: Progress,
    api_key: str | None = None,
) -> RunRecord:
    """One rollout inside one response over a fresh WebSocket, then the continuation; the MCP server's outputs are
    `sizes` (characters, the `ws` rollout's, in call order)."""
    steps = rollout.turns - 1
    await _control(server, "POST", "/round", {"seed": rollout.seed, "sizes": sizes})
    client = await open_client("ws", base_url, mcp_fields(config, server.url), api_key)
    try:
        progress.update(f"agent-loop run {run + 1}/{config.runs} {'mcp':<10} {steps} steps in one response")
        start = time.perf_counter()
        result = await client.turn(rollout.first_input())
        e2e_ms = (time.perf_counter() - start) * 1000.0
        after = await client.turn([user_message(CONTINUATION)])
    finally:
        await client.close()
    stats = await _control(server, "GET", "/stats")
    if result.status != "completed" or after.status != "completed":
        raise BenchError(f"mcp: response {result.response_id} is {result.status}, the continuation {after.status}")
    calls = [item for item in result.output if item.get("type") == "mcp_call"]
    failed = [item for item in calls if item.get("error")]
    if len(calls) != steps or failed:
        raise BenchError(f"mcp: {len(calls)} MCP calls ({len(failed)} failed), {steps} expected: {failed[:1]!r}"[:800])
    generations = steps + 1
    # Each generation's model time is ttft + (its output tokens - 1) / tps; `usage` sums the generations.
    own = generations * config.ttft_ms + max(0, result.output_tokens - generations) / config.tps * 1000.0
    timings = result.timings or {}
    tool_total = sum(stats["tool_ms"])
    entry = TurnRecord(
        turn=0,
        context_tokens=result.input_tokens,  # summed over the response's generations
        output_tokens=result.output_tokens,
        ttft_ms=None if result.ttft_s is None else result.ttft_s * 1000.0,
        turn_ms=result.turn_s * 1000.0,
        model_ms=own,
        overhead_ms=result.turn_s * 1000.0 - own - tool_total,
        tool_ms=tool_total,
        timings=result.timings,
        cached_tokens=result.cached_tokens,
    )
    record = RunRecord(mode="mcp", run=run, e2e_ms=e2e_ms, physical_ms=own + config.tool_ms * steps, turns=[entry])
    record.mcp = _measured(steps, timings, after.timings or {}, stats, after.input_tokens)
    record.mcp["excess_per_step_ms"] = (record.e2e_ms - record.physical_ms) / max(1, steps)
    return record


def _measured(
    steps: int, timings: dict[str, Any], after: dict[str, Any], stats: dict[str, Any], context_after: int
) -> dict[str, Any]:
    """hotloop's time per step beside the MCP server's own (stage timings in ms, from `hotloop:timing_metrics`)."""
    per = max(1, steps)
    requests: dict[str, list[float]] = stats["requests_ms"]
    served = sum(requests.get("tools/call", []))  # the MCP server's HTTP request walls: its SDK and the tool
    tool = sum(stats["tool_ms"])  # the tool function's own wall time
    step, call = float(timings.get("mcp_step", 0.0)), float(timings.get("mcp_call", 0.0))
    return {
        "steps": steps,
        "generations": steps + 1,
        "server_calls": stats["calls"],
        "tools_list_requests": len(requests.get("tools/list", [])),
        "sessions_opened": len(requests.get("initialize", [])),
        "tcp_connections": stats["connections"],  # the MCP server's peers that POSTed this run
        "list_first_ms": timings.get("mcp_list"),  # the loop's create: the list request (the session is open)
        "list_cached_ms": after.get("mcp_list"),  # the continuation: the chain's tool list, reused
        "continuation_pre_inference_ms": after.get("pre_inference"),
        "context_after_tokens": context_after,  # the continuation's prompt: the whole loop and a short message
        "mcp_step_ms": step,
        "mcp_call_ms": call,
        "server_request_ms": served,
        "server_tool_ms": tool,
        # Per step: the prompt extension (mcp_step), the call's dispatch beyond the MCP server's request time (the
        # SDK client, the HTTP hop, the mcp_call events), and the MCP server's own SDK time beyond the tool's.
        "extension_per_step_ms": step / per,
        "dispatch_per_step_ms": (call - served) / per,
        "server_sdk_per_call_ms": (served - tool) / per,
        "hotloop_per_step_ms": (step + call - served) / per,
        "beyond_tool_per_step_ms": (step + call - tool) / per,
    }


def mcp_summary(config: AgentLoopConfig, runs: list[RunRecord]) -> dict[str, Any]:
    """Mode `mcp`'s entry in the result: the runs and their medians, the per-step figures among them."""
    e2e = median(r.e2e_ms for r in runs)
    physical = median(r.physical_ms for r in runs)
    steps = max(1, config.turns - 1)
    measured = medians([r.mcp or {} for r in runs])
    ttfts = [t.ttft_ms for r in runs for t in r.turns if t.ttft_ms is not None]
    return {
        "runs": [asdict(r) for r in runs],
        "per_turn_median": [],
        "median": {
            "e2e_ms": e2e,
            "physical_ms": physical,
            "e2e_over_physical": ratio(e2e, physical),
            "excess_ms": e2e - physical,
            "excess_per_step_ms": (e2e - physical) / steps,
            "turns_completed": int(measured.get("generations", 0)),
            "ttft_ms": median(ttfts) if ttfts else None,
            "tool_ms_total": median(r.turns[0].tool_ms for r in runs),
            "context_last_turn_tokens": int(measured.get("context_after_tokens", 0)),
            "mcp": measured,
        },
    }
