"""`hotloop bench`: the argument parsers of the scenarios and the function that runs one."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from hotloop.bench.agent_config import AGENT_MODES
from hotloop.bench.clients import MODES, BenchError
from hotloop.bench.invocation import run_client, upstream_config, upstream_table
from hotloop.bench.scenario import HISTORY_SHAPES, TOOL_SETS
from hotloop.config import available_cores

if TYPE_CHECKING:
    from hotloop.bench.load_config import LoadConfig
    from hotloop.bench.progress import Progress
    from hotloop.bench.recording import Recording

Formatter = argparse.ArgumentDefaultsHelpFormatter


def _modes(known: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(raw: str) -> tuple[str, ...]:
        modes = tuple(part.strip() for part in raw.split(",") if part.strip())
        unknown = [mode for mode in modes if mode not in known]
        if unknown or not modes:
            raise argparse.ArgumentTypeError(f"modes must be among {', '.join(known)}")
        return modes

    return parse


def _tool_sets(raw: str) -> tuple[str, ...]:
    sets = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    if not sets or any(name not in TOOL_SETS for name in sets):
        raise argparse.ArgumentTypeError(f"tool sets must be among {', '.join(TOOL_SETS)}")
    return sets


def _sizes(raw: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of token counts") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError("each size must be at least 100 tokens")
    return sizes


def _rtts(raw: str) -> tuple[float, ...]:
    try:
        rtts = tuple(dict.fromkeys(float(part) for part in raw.split(",") if part.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of round-trip times in ms") from None
    if not rtts or min(rtts) < 0:
        raise argparse.ArgumentTypeError("each round-trip time must be 0 or more ms")
    return rtts


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


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _common(parser: argparse.ArgumentParser, known: tuple[str, ...] = MODES, more: str = "") -> None:
    parser.add_argument(
        "--modes",
        type=_modes(known),
        default=",".join(MODES),
        metavar="MODES",
        help="comma-separated modes: http-full (store=false, whole history resent, SSE, one keep-alive "
        "connection), http-chain (store=true, previous_response_id + new items, SSE), ws (one WebSocket, "
        "store=false, previous_response_id + new items)" + more,
    )
    parser.add_argument("--json", metavar="PATH", help="write the results (per mode, per turn, medians) as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG plot of the results")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="benchmark a running server (e.g. http://127.0.0.1:8000/v1) instead of starting one; it must serve "
        "hotloop-sim",
    )
    parser.add_argument("--api-key", metavar="KEY", help="bearer key for --base-url, if the server wants one")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench",
        help="measure per-turn API overhead and agent-loop time",
        description="Benchmarks against hotloop-sim, whose model time is known exactly, so that everything else "
        "(transport, parsing, state, rendering, persistence) shows as overhead. Unless --base-url is given, a "
        "server is started on 127.0.0.1 (uvicorn with uvloop, httptools, websockets-sansio; a temporary data "
        "directory; hotloop-sim only): agent-loop and load run it as a process of its own, overhead in-process. "
        "Scenarios: agent-loop, overhead, load; see "
        "`hotloop bench SCENARIO --help`. docs/benchmarks.md has results and how to read them.",
        formatter_class=Formatter,
    )
    scenarios = bench.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    loop = scenarios.add_parser(
        "agent-loop",
        help="scripted Codex-like rollouts, end to end, against the physical limit",
        description="Replay a scripted Codex-like rollout in each mode: every turn but the last, hotloop-sim "
        "calls a declared tool; the client runs it (sleeps --tool-ms) and answers with a function_call_output "
        "(with --tools typed: a shell_call_output or an apply_patch_call_output) of realistic text (listings, "
        "code, logs) sized so that the context grows linearly to about --context-tokens by the last turn. "
        "Reports per mode: end-to-end time, TTFT per turn as seen by the client, overhead per turn (turn time "
        "minus model time) and the physical limit (model time + tool time), with medians over --runs and ratios "
        "between modes.",
        formatter_class=Formatter,
    )
    loop.add_argument(
        "--turns", type=_positive(int), default=50, help="turns per rollout (all but the last call a tool)"
    )
    loop.add_argument("--context-tokens", type=_positive(int), default=100_000, help="context at the last turn")
    loop.add_argument("--tps", type=_positive(float), default=1000.0, help="simulated output tokens per second")
    loop.add_argument("--ttft-ms", type=_non_negative, default=20.0, help="simulated time to first token (ms)")
    loop.add_argument("--tool-ms", type=_non_negative, default=50.0, help="time each tool call takes (ms)")
    loop.add_argument(
        "--compact-threshold",
        type=_positive(int),
        default=None,
        help="a long session: compact past this many prompt tokens (context_management); tool outputs then have "
        "a fixed size, --context-tokens over the whole session",
    )
    loop.add_argument(
        "--context-window",
        type=_positive(int),
        default=None,
        help="the model's context window: the in-process hotloop-sim's (sim_context_window) or the --upstream "
        "engine's (default 131072)",
    )
    loop.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="a reasoning model: tokens of thinking before each call and the answer (model time, in output_tokens)",
    )
    loop.add_argument("--runs", type=_positive(int), default=3, help="rollouts per mode (medians are reported)")
    loop.add_argument(
        "--tools",
        type=_tool_sets,
        default="function",
        metavar="SETS",
        help="comma-separated tool sets, each mode run with each side by side: function (shell, apply_patch and "
        "update_plan as function tools), typed (the typed shell and apply_patch tools, answered with "
        "shell_call_output / apply_patch_call_output; update_plan stays a function; modes labelled MODE+typed)",
    )
    loop.add_argument(
        "--deferred",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="also declare N connector function tools marked defer_loading and a server-run tool_search: the "
        "first model call searches and loads some inside the first turn's response. Reports the first turn's "
        "prompt tokens with the N tools deferred and inline (one request each)",
    )
    loop.add_argument(
        "--mcp",
        action="store_true",
        help="also run the loop inside the server (mode mcp, after ws, which --modes must hold): the tool is an MCP "
        "server (the mcp SDK, streamable HTTP on 127.0.0.1, its own process) sleeping --tool-ms and returning the "
        "ws rollout's tool outputs; one create calls it turns-1 times inside its response. Reports both against "
        "the physical limit and hotloop's own time per MCP step (prompt extension, call dispatch, the list cached)",
    )
    loop.add_argument(
        "--mcp-json-response",
        action="store_true",
        help="with --mcp: the MCP server answers each request with a JSON body, not an event stream (the SDK "
        "client then keeps its connection; with event streams it opens one per request)",
    )
    loop.add_argument(
        "--client-rtt-ms",
        type=_rtts,
        metavar="RTTS",
        help="a far client: run the modes at each of these comma-separated round-trip times R (ms, e.g. "
        "0,5,20,50) between the bench's client and hotloop, through a latency-injecting TCP proxy (its own process, "
        "R/2 each way; R=0 direct); --mcp's MCP server stays next to hotloop. Reports per R and mode e2e, the "
        "physical limit (no RTT in it), limit + round trips x R and the ratios to ws; --plot draws them against R",
    )
    loop.add_argument(
        "--in-process-server",
        action="store_true",
        help="run hotloop in a thread of the bench's process (the client then shares its GIL), not as a process of "
        "its own (`hotloop serve`, one worker): the set-up of the figures measured before issue 31",
    )
    _upstream_arguments(loop)
    _common(
        loop,
        AGENT_MODES,
        ", inject (after ws: the same loop as ONE multi-agent response on one WebSocket, each tool output sent by "
        "response.inject, not by a new response.create; the ws rollout's tool outputs; hotloop-sim only)",
    )
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
    over.add_argument(
        "--history",
        choices=HISTORY_SHAPES,
        default="tools",
        help="the history's shape: tools (a task, then shell calls with ~6 KB outputs), message (one user message "
        "of the whole size), items (many small messages, ~25 tokens each)",
    )
    _common(over)
    _load_parser(scenarios)


def _upstream_arguments(loop: argparse.ArgumentParser) -> None:
    loop.add_argument(
        "--upstream",
        metavar="URL",
        help="run hotloop in front of this engine (e.g. a `hotloop sim-engine` at http://127.0.0.1:8100/v1) instead "
        "of hotloop-sim; the engine must call a tool on every turn but the last (sim-engine: --tool-calls >= "
        "--turns) and pace itself (--tps and --prefill-us-per-token then describe it, for the physical limit)",
    )
    loop.add_argument(
        "--upstream-backend",
        choices=("tokens", "openai-chat"),
        default="tokens",
        help="with --upstream: hotloop sends token ids (tokens) or chat messages (openai-chat)",
    )
    loop.add_argument(
        "--dialect",
        choices=("vllm", "sglang", "llamacpp"),
        default="vllm",
        help="with --upstream-backend tokens: the engine's token-ID API (docs/backends.md)",
    )
    loop.add_argument(
        "--prefill-us-per-token",
        type=_non_negative,
        default=50.0,
        help="with --upstream: the engine's prefill cost per uncached prompt token (sim-engine's flag)",
    )
    loop.add_argument(
        "--upstream-model",
        metavar="NAME",
        help="with --upstream: the engine's name for its model (vLLM's served model name); default: any",
    )
    loop.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="with --upstream-backend tokens: the engine model's tokenizer.json or model directory (default: "
        "SmolLM2's, which sim-engine uses)",
    )
    loop.add_argument(
        "--tool-choice",
        choices=("auto", "required"),
        default="auto",
        help="tool_choice of every turn; `required` makes a real model call a tool each turn (the tokens backend "
        "constrains its output to a call)",
    )
    loop.add_argument(
        "--temperature",
        type=_non_negative,
        help="with --upstream: every turn's temperature (e.g. 0 for a small real model); default: the engine's",
    )
    loop.add_argument(
        "--max-output-tokens",
        type=int,
        metavar="N",
        help="with --upstream: every turn's max_output_tokens; default: none",
    )


def _counts(raw: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of connection counts") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("each connection count must be at least 1")
    return counts


def _load_parser(scenarios: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = scenarios.add_parser(
        "load",
        help="many concurrent WebSocket agent sessions: overhead percentiles, CPU, memory, errors",
        description="Open --connections WebSockets at once (their starts spread over --ramp-s) and run a scripted "
        "agent rollout of --turns turns on each (hotloop-sim calls a tool every turn but the last; the client "
        "answers after --tool-ms). Unless --base-url is given, the server runs as its own process (`hotloop "
        "serve`, hotloop-sim, a temporary data directory), so that the client's CPU is not the server's, and its "
        "CPU time (also per turn, and idle before the load) and peak memory are measured. Reports p50/p99 overhead "
        "per turn (turn time seen by the client - model time) and the server's own share (pre_inference + "
        "post_inference), throughput and errors. --sweep runs several connection counts, each against a fresh "
        "server, and names the largest with no errors and p99 overhead under --p99-target-ms. With --upstream, the "
        "server serves that engine instead of hotloop-sim. --floor also runs each load against a floor server (the "
        "same uvicorn stack with no pipeline, replaying a recorded hotloop rollout) and reports hotloop / floor "
        "ratios. Exits 1 if any session failed.",
        formatter_class=Formatter,
    )
    load.add_argument("--connections", type=_positive(int), default=200, help="concurrent WebSocket sessions")
    load.add_argument(
        "--sweep", type=_counts, metavar="COUNTS", help="comma-separated connection counts to run in turn"
    )
    load.add_argument("--turns", type=_positive(int), default=20, help="turns per rollout")
    load.add_argument("--rollouts", type=_positive(int), default=1, help="rollouts per connection, one after another")
    load.add_argument("--tps", type=_positive(float), default=1000.0, help="simulated output tokens per second")
    load.add_argument("--ttft-ms", type=_non_negative, default=20.0, help="simulated time to first token (ms)")
    load.add_argument("--tool-ms", type=_non_negative, default=50.0, help="time each tool call takes (ms)")
    load.add_argument(
        "--context-tokens", type=_positive(int), default=10_000, help="context of a session at its last turn"
    )
    load.add_argument("--ramp-s", type=_non_negative, default=1.0, help="sessions start spread over this time")
    load.add_argument("--store", action="store_true", help="send store=true (every turn is persisted)")
    load.add_argument(
        "--workers", type=_non_negative_int, default=0, help="server worker processes (0: one per core, as serve)"
    )
    load.add_argument("--store-url", metavar="URL", help="the server's store_url (default: SQLite, a temp dir)")
    load.add_argument("--p99-target-ms", type=_positive(float), default=5.0, help="the p99 overhead to stay under")
    load.add_argument(
        "--idle-s",
        type=_non_negative,
        default=2.0,
        help="before the load, measure the server's CPU this long with no traffic (0: not measured)",
    )
    load.add_argument(
        "--floor",
        action="store_true",
        help="also run each load against a floor server: the same uvicorn stack with no pipeline, replaying the "
        "events of a rollout recorded from hotloop at the same model pacing; reports hotloop / floor ratios",
    )
    load.add_argument(
        "--pin",
        choices=("auto", "off"),
        default="auto",
        help="auto: with two or more cores, run the server and this load generator on different cores (a quarter "
        "of them, at least one, for the generator); off: both wherever the OS puts them",
    )
    load.add_argument("--json", metavar="PATH", help="write the results as JSON")
    load.add_argument("--base-url", metavar="URL", help="load a running server (e.g. http://127.0.0.1:8000/v1) instead")
    load.add_argument("--server-pid", type=int, metavar="PID", help="with --base-url: measure this process's CPU")
    load.add_argument("--api-key", metavar="KEY", help="bearer key for --base-url, if the server wants one")
    load.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _upstream_arguments(load)


def run_bench(args: argparse.Namespace) -> int:
    from hotloop.bench import report
    from hotloop.bench.clients import BenchError
    from hotloop.bench.progress import Progress

    progress = Progress(enabled=not args.quiet)
    failed = False
    try:
        if args.scenario == "agent-loop":
            from hotloop.bench.agent_command import run_agent_command

            result = run_agent_command(args, progress)
            if "client_rtt" in result:
                from hotloop.bench import rtt_report

                print(rtt_report.rtt_table(result))
                if args.plot:
                    rtt_report.plot_rtt(result, args.plot)
            else:
                print(report.agent_loop_table(result))
                if args.plot:
                    report.plot_agent_loop(result, args.plot)
        elif args.scenario == "load":
            from hotloop.bench.load import any_errors

            result = _run_load(args, progress)
            print(report.load_table(result))
            failed = any_errors(result)
        else:
            from hotloop.bench.overhead import OverheadConfig, run_overhead

            over = OverheadConfig(
                context_tokens=args.context_tokens, samples=args.samples, modes=args.modes, history=args.history
            )
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
    return 1 if failed else 0


def _run_load(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    """Each connection count against a fresh server process (or against --base-url); with --floor, then against a
    fresh floor server replaying a rollout recorded once from the first hotloop server."""
    from hotloop.bench.cores import pinned, split
    from hotloop.bench.load import floor_ratios, load_result, run_load
    from hotloop.bench.recording import record_rollout

    if args.floor and args.upstream:
        raise BenchError("--floor replays hotloop-sim's turns: not with --upstream")
    # A server of ours and this generator on different cores (bench/cores.py); a --base-url server is left alone.
    cores = split() if args.pin == "auto" and not args.base_url else None
    server_cpus = cores.server if cores is not None else None
    runs = []
    recording: Recording | None = None
    with pinned(cores.client if cores is not None else None):
        for count in args.sweep or (args.connections,):
            config = _load_config(args, count)
            with _load_target(args, count, server_cpus) as (url, api_key, pid):
                if args.floor and recording is None:
                    recording = run_client(record_rollout(url, config, api_key))
                run = run_client(run_load(url, config, api_key, progress, pid))
            if recording is not None:
                run["floor"] = _floor_run(config, recording, progress, server_cpus)
                run["vs_floor"] = floor_ratios(run, run["floor"])
            runs.append(run)
    progress.done()
    workers = args.workers or (len(server_cpus) if server_cpus else available_cores())
    result = load_result(config, runs, args.p99_target_ms, workers)
    result["config"]["floor"] = bool(args.floor)
    result["config"]["pin"] = args.pin if cores is not None else "off"
    return result


def _load_config(args: argparse.Namespace, count: int) -> LoadConfig:
    from hotloop.bench.load_config import LoadConfig

    return LoadConfig(
        connections=count,
        turns=args.turns,
        tps=args.tps,
        ttft_ms=args.ttft_ms,
        tool_ms=args.tool_ms,
        context_tokens=args.context_tokens,
        ramp_s=args.ramp_s,
        rollouts=args.rollouts,
        store=args.store,
        idle_s=args.idle_s,
        upstream=upstream_config(args),
    )


@contextlib.contextmanager
def _load_target(
    args: argparse.Namespace, count: int, cpus: frozenset[int] | None = None
) -> Iterator[tuple[str, str | None, int | None]]:
    """The server a load run talks to: (base URL, API key, pid to measure), --base-url or a fresh server process
    (on `cpus`, if given)."""
    from hotloop.bench.server_process import ServerProcess

    if args.base_url:
        if args.upstream:
            raise BenchError("--upstream starts its own hotloop: not with --base-url")
        yield args.base_url, args.api_key, args.server_pid
        return
    settings: dict[str, Any] = {"workers": args.workers, "max_connections_per_key": count + 16}
    settings["max_connections"] = count + 16
    upstream = upstream_table(args)
    if upstream is not None:  # hotloop serves the engine as its one model
        from hotloop.bench.server_process import UPSTREAM_MODEL

        settings.update(models=UPSTREAM_MODEL, default_model=UPSTREAM_MODEL, upstreams={UPSTREAM_MODEL: upstream})
    if args.store_url:
        settings["store_url"] = args.store_url
    with ServerProcess(cpus, **settings) as server:
        yield server.base_url, None, server.pid


def _floor_run(
    config: LoadConfig, recording: Recording, progress: Progress, cpus: frozenset[int] | None = None
) -> dict[str, Any]:
    """The same load against the floor server (bench/floor.py), its tool outputs sized with hotloop's chars/token,
    on the same cores as hotloop's server."""
    from hotloop.bench.load import run_load
    from hotloop.bench.server_process import FloorProcess

    with FloorProcess(recording, cpus) as floor:
        job = run_load(floor.base_url, config, None, progress, floor.pid, cpt=recording.chars_per_token, label="floor")
        return run_client(job)


def _with_server(
    args: argparse.Namespace, scenario: Callable[[str], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """The overhead scenario against --base-url or a server in this process."""
    if args.base_url:
        return run_client(scenario(args.base_url))
    from hotloop.bench.server import InProcessServer

    with InProcessServer() as server:
        return run_client(scenario(server.base_url))
