"""`hotloop bench`: the argument parsers of the scenarios and the function that runs one."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from hotloop.bench.clients import MODES

Formatter = argparse.ArgumentDefaultsHelpFormatter


def _modes(raw: str) -> tuple[str, ...]:
    modes = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"modes must be among {', '.join(MODES)}")
    return modes


def _sizes(raw: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of token counts") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError("each size must be at least 100 tokens")
    return sizes


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        value = kind(raw)
        if value <= 0:
            raise argparse.ArgumentTypeError("must be positive")
        return value

    return parse


def _non_negative(raw: str) -> float:
    value = float(raw)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes",
        type=_modes,
        default=",".join(MODES),
        metavar="MODES",
        help="comma-separated modes: http-full (store=false, whole history resent, SSE, one keep-alive "
        "connection), http-chain (store=true, previous_response_id + new items, SSE), ws (one WebSocket, "
        "store=false, previous_response_id + new items)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results (per mode, per turn, medians) as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG plot of the results")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="benchmark a running server (e.g. http://127.0.0.1:8000/v1) instead of starting one in-process; it "
        "must serve hotloop-sim",
    )
    parser.add_argument("--api-key", metavar="KEY", help="bearer key for --base-url, if the server wants one")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench",
        help="measure per-turn API overhead and agent-loop time",
        description="Benchmarks against hotloop-sim, whose model time is known exactly, so that everything else "
        "(transport, parsing, state, rendering, persistence) shows as overhead. Unless --base-url is given, a "
        "server is started in-process on 127.0.0.1 (uvicorn with uvloop, httptools, websockets-sansio; a "
        "temporary data directory; hotloop-sim only). Scenarios: agent-loop, overhead; see "
        "`hotloop bench SCENARIO --help`. docs/benchmarks.md has results and how to read them.",
        formatter_class=Formatter,
    )
    scenarios = bench.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    loop = scenarios.add_parser(
        "agent-loop",
        help="scripted Codex-like rollouts, end to end, against the physical limit",
        description="Replay a scripted Codex-like rollout in each mode: every turn but the last, hotloop-sim "
        "calls a declared tool; the client runs it (sleeps --tool-ms) and answers with a function_call_output "
        "of realistic text (listings, code, logs) sized so that the context grows linearly to about "
        "--context-tokens by the last turn. Reports per mode: end-to-end time, TTFT per turn as seen by the "
        "client, overhead per turn (turn time minus model time) and the physical limit (model time + tool time), "
        "with medians over --runs and ratios between modes.",
        formatter_class=Formatter,
    )
    loop.add_argument(
        "--turns", type=_positive(int), default=50, help="turns per rollout (all but the last call a tool)"
    )
    loop.add_argument("--context-tokens", type=_positive(int), default=100_000, help="context at the last turn")
    loop.add_argument("--tps", type=_positive(float), default=1000.0, help="simulated output tokens per second")
    loop.add_argument("--ttft-ms", type=_non_negative, default=20.0, help="simulated time to first token (ms)")
    loop.add_argument("--tool-ms", type=_non_negative, default=50.0, help="time each tool call takes (ms)")
    loop.add_argument("--runs", type=_positive(int), default=3, help="rollouts per mode (medians are reported)")
    _common(loop)
    over = scenarios.add_parser(
        "overhead",
        help="per-turn server overhead against history size",
        description="For each history size and mode, build a conversation of that size once (a first request "
        "with the whole history as input), then time --samples small continuations (one short user message; "
        "sim_ttft_ms 0 and a huge sim_tps, so model time is about 0), alternating between the modes. Reports "
        "the median and p90 per mode and size.",
        formatter_class=Formatter,
    )
    over.add_argument(
        "--context-tokens",
        type=_sizes,
        default="1000,10000,100000",
        metavar="SIZES",
        help="comma-separated history sizes in tokens",
    )
    over.add_argument("--samples", type=_positive(int), default=30, help="continuations timed per mode and size")
    _common(over)


def run_bench(args: argparse.Namespace) -> int:
    from hotloop.bench import report
    from hotloop.bench.clients import BenchError
    from hotloop.bench.progress import Progress

    progress = Progress(enabled=not args.quiet)
    try:
        if args.scenario == "agent-loop":
            from hotloop.bench.agent_loop import AgentLoopConfig, run_agent_loop

            config = AgentLoopConfig(
                turns=args.turns,
                context_tokens=args.context_tokens,
                tps=args.tps,
                tool_ms=args.tool_ms,
                ttft_ms=args.ttft_ms,
                modes=args.modes,
                runs=args.runs,
            )
            result = _with_server(args, lambda url: run_agent_loop(url, config, args.api_key, progress))
            print(report.agent_loop_table(result))
            if args.plot:
                report.plot_agent_loop(result, args.plot)
        else:
            from hotloop.bench.overhead import OverheadConfig, run_overhead

            over = OverheadConfig(context_tokens=args.context_tokens, samples=args.samples, modes=args.modes)
            result = _with_server(args, lambda url: run_overhead(url, over, args.api_key, progress))
            print(report.overhead_table(result))
            if args.plot:
                report.plot_overhead(result, args.plot)
    except (BenchError, OSError, ImportError) as exc:
        progress.done()
        print(f"hotloop bench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        report.write_json(result, args.json)
    return 0


def _with_server(
    args: argparse.Namespace, scenario: Callable[[str], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    if args.base_url:
        return _run(scenario(args.base_url))
    from hotloop.bench.server import InProcessServer

    with InProcessServer() as server:
        return _run(scenario(server.base_url))


def _run(job: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run the client on uvloop when it is installed (as the server does), else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(job)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(job)
