"""`hotloop bench agent-loop` from its parsed arguments: the options checked against one another, the settings of
the run, its servers started (--mcp's tool server, hotloop unless --base-url), and the loop run, at each R of
--client-rtt-ms if given."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from hotloop.bench.agent_config import AgentLoopConfig
from hotloop.bench.clients import BenchError
from hotloop.bench.invocation import run_client, upstream_config, upstream_table
from hotloop.bench.progress import Progress


def agent_config(args: argparse.Namespace) -> AgentLoopConfig:
    """The run's settings; BenchError for options that do not go together."""
    if args.mcp_json_response and not args.mcp:
        raise BenchError("--mcp-json-response is an option of --mcp")
    if args.mcp and (args.tools != ("function",) or args.deferred):
        raise BenchError("--mcp compares with the ws loop of function tools: not with --tools or --deferred")
    if args.mcp and (args.base_url or args.upstream or args.compact_threshold is not None):
        raise BenchError(
            "--mcp runs its own hotloop on hotloop-sim: not with --base-url, --upstream or --compact-threshold"
        )
    if args.mcp and "ws" not in args.modes:
        raise BenchError("--mcp returns the ws rollout's tool outputs: --modes must include ws")
    if args.upstream and args.base_url:
        raise BenchError("--upstream starts its own hotloop: not with --base-url")
    if "inject" in args.modes and (args.upstream or args.compact_threshold is not None or args.deferred):
        # Each step's model time is hotloop-sim's (ttft + decode: an engine's prefill is not split per generation);
        # a multi-agent response compacts only at its create; a server-run search is a generation of its own.
        raise BenchError("mode inject runs on hotloop-sim: not with --upstream, --compact-threshold or --deferred")
    if "inject" in args.modes and "ws" not in args.modes[: args.modes.index("inject")]:
        raise BenchError("mode inject sends the ws rollout's tool outputs: --modes must list ws before it")
    return AgentLoopConfig(
        turns=args.turns,
        context_tokens=args.context_tokens,
        tps=args.tps,
        tool_ms=args.tool_ms,
        ttft_ms=args.ttft_ms,
        reasoning_tokens=args.reasoning_tokens,
        compact_threshold=args.compact_threshold,
        modes=(*args.modes, "mcp") if args.mcp else args.modes,
        runs=args.runs,
        mcp=args.mcp,
        mcp_json_response=args.mcp_json_response,
        tools=args.tools,
        deferred=args.deferred,
        **upstream_config(args),
    )


def run_agent_command(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    """`--mcp`'s tool server (its own process), then hotloop (--base-url, or its own: a child process unless
    --in-process-server, allowed to call that tool server), then the loop; the JSON-ready result."""
    from hotloop.bench.agent_loop import run_agent_loop
    from hotloop.bench.target import own_hotloop

    config = agent_config(args)
    with contextlib.ExitStack() as stack:
        tools = None
        if args.mcp:
            from hotloop.bench.mcp_tools import McpToolProcess

            tools = stack.enter_context(McpToolProcess(config.tool_ms, json_response=args.mcp_json_response))
        allowed = [tools.url] if tools else []
        url = args.base_url or stack.enter_context(
            own_hotloop(args.in_process_server, upstream_table(args), args.context_window, allowed)
        )
        if args.client_rtt_ms is not None:
            from hotloop.bench.rtt import run_rtt_sweep

            return run_client(run_rtt_sweep(url, config, args.client_rtt_ms, args.api_key, progress, tools))
        return run_client(run_agent_loop(url, config, args.api_key, progress, tools))
