"""The load scenario: many concurrent WebSocket agent sessions, each a scripted rollout, against one server.

Every session opens its own WebSocket and runs `turns` turns of the agent loop (hotloop-sim calls a tool, the
client answers it after `tool_ms`); sessions start spread over `ramp_s` so they do not move in lockstep. Per turn
the client records the overhead (turn time seen by the client - model time, as in the agent-loop scenario) and the
server's own share (`pre_inference + post_inference` from the `hotloop:timing_metrics` event).
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import BenchError, WsClient
from hotloop.bench.cores import cores_of, limit
from hotloop.bench.load_config import LoadConfig, loop_config, session_fields
from hotloop.bench.progress import Progress
from hotloop.bench.rollout import model_ms, run_rollout
from hotloop.bench.scenario import Rollout
from hotloop.bench.stats import median, percentile, ratio

if TYPE_CHECKING:
    from hotloop.bench.server_process import ResourceMonitor

ERRORS_KEPT = 10  # distinct error messages kept in the result


@dataclass
class Session:
    index: int
    connect_ms: float = 0.0
    overhead_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    error: str | None = None


def server_share(timings: dict[str, Any] | None) -> float | None:
    """The server's own time in a turn (ms): request → backend plus last token → terminal event."""
    if not timings or "pre_inference" not in timings:
        return None
    return float(timings["pre_inference"]) + float(timings.get("post_inference", 0.0))


async def _session(
    index: int, base_url: str, config: LoadConfig, rollout: Rollout, api_key: str | None, start_at: float
) -> Session:
    session = Session(index)
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    loop = loop_config(config)
    fields = session_fields(config)
    client: WsClient | None = None
    try:
        opened = time.perf_counter()
        client = await asyncio.wait_for(WsClient.open(base_url, fields, api_key), config.turn_timeout_s)
        session.connect_ms = (time.perf_counter() - opened) * 1000.0
        turns = []
        for run in range(config.rollouts):
            client.previous = None  # a new conversation on the same WebSocket
            record = await asyncio.wait_for(
                run_rollout(client, rollout, loop, run, Progress(enabled=False)), config.turn_timeout_s * config.turns
            )
            turns += record.turns
        for turn in turns:
            session.overhead_ms.append(turn.overhead_ms)
            if turn.ttft_ms is not None:
                session.ttft_ms.append(turn.ttft_ms)
            share = server_share(turn.timings)
            if share is not None:
                session.server_ms.append(share)
    except Exception as exc:  # an error event, a timeout, a dropped connection (websockets' ConnectionClosed)
        session.error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        if client is not None:
            try:
                await client.close()
            except Exception:
                pass
    return session


async def run_load(
    base_url: str,
    config: LoadConfig,
    api_key: str | None = None,
    progress: Progress | None = None,
    server_pid: int | None = None,
    cpt: float | None = None,
    label: str = "load",
) -> dict[str, Any]:
    """One load run: a warm-up session, the idle server's CPU, then `connections` sessions at once; the JSON-ready
    result. `cpt` fixes the chars per token that size the tool outputs (the floor cannot count tokens); `label`
    names the server in the progress lines."""
    from hotloop.bench.server_process import ResourceMonitor

    progress = progress or Progress(enabled=False)
    if cpt is None:
        cpt = await chars_per_token(base_url, api_key, loop_config(config).model)
    rollout = Rollout(turns=config.turns, context_tokens=config.context_tokens, chars_per_token=cpt)
    warm = await _session(0, base_url, replace(config, rollouts=1), rollout, api_key, 0.0)
    if warm.error:
        raise BenchError(f"warm-up session failed: {warm.error}")
    idle = await idle_cpu(server_pid, config.idle_s) if server_pid else None
    monitor = ResourceMonitor(server_pid).start() if server_pid else None
    load_before = os.getloadavg()[0]  # how busy the machine was: other work skews every figure
    client_cpu = _own_cpu()
    progress.update(f"{label}: {config.connections} connections x {config.turns} turns")
    start = time.perf_counter()
    spacing = config.ramp_s / max(1, config.connections)
    jobs = [
        _session(index, base_url, config, rollout, api_key, start + index * spacing)
        for index in range(config.connections)
    ]
    sessions = await asyncio.gather(*jobs)
    wall_s = time.perf_counter() - start
    client_cpu = _own_cpu() - client_cpu
    if monitor is not None:
        monitor.stop()
    result = summarize(config, sessions, wall_s)
    result["chars_per_token"] = cpt
    result["loadavg_1m"] = [load_before, os.getloadavg()[0]]
    result["client_cpu_s"] = client_cpu
    result.update(_server_figures(monitor, wall_s, result["turns"]))
    result["server_idle_cpu_ms_per_s"] = idle
    result.update(_shares(server_pid, result["server_cpu_percent"], client_cpu, wall_s))
    progress.update(f"{label}: {_line(result)}", final=True)
    return result


async def idle_cpu(server_pid: int, seconds: float) -> float | None:
    """The server's CPU (ms per second) over `seconds` with no traffic: its background work (timers, flushes)."""
    from hotloop.bench.server_process import ResourceMonitor

    if seconds <= 0:
        return None
    monitor = ResourceMonitor(server_pid).start()
    await asyncio.sleep(seconds)
    monitor.stop()
    return monitor.cpu_s * 1000.0 / seconds


def _server_figures(monitor: ResourceMonitor | None, wall_s: float, turns: int) -> dict[str, float | None]:
    """CPU and memory of the server process during the run; the CPU also per completed turn (everything the server
    did in the run, connection handshakes included, over the turns it completed)."""
    if monitor is None:
        return dict.fromkeys(("server_cpu_s", "server_cpu_ms_per_turn", "server_cpu_percent", "server_peak_rss_mib"))
    return {
        "server_cpu_s": monitor.cpu_s,
        "server_cpu_ms_per_turn": monitor.cpu_s * 1000.0 / turns if turns else None,
        "server_cpu_percent": 100.0 * monitor.cpu_s / wall_s,
        "server_peak_rss_mib": monitor.peak_rss / 2**20,
    }


def _shares(server_pid: int | None, server_percent: float | None, client_cpu: float, wall_s: float) -> dict[str, Any]:
    """Where each side ran and how much of its cores' time it used (0-1), and which one was the limit."""
    client_cores = cores_of(os.getpid()) or []
    server_cores = cores_of(server_pid) if server_pid else None
    client_share = client_cpu / wall_s / max(1, len(client_cores))
    server_share = server_percent / 100 / len(server_cores) if server_percent is not None and server_cores else None
    return {
        "cores": {"server": server_cores, "client": client_cores},
        "server_cpu_share": server_share,
        "client_cpu_share": client_share,
        "limit": limit(server_share, client_share),
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def summarize(config: LoadConfig, sessions: list[Session], wall_s: float) -> dict[str, Any]:
    overhead = [value for s in sessions for value in s.overhead_ms]
    server = [value for s in sessions for value in s.server_ms]
    ttft = [value for s in sessions for value in s.ttft_ms]
    errors = [s.error for s in sessions if s.error]
    return {
        "connections": config.connections,
        "turns": len(overhead),
        "turns_expected": config.connections * config.turns * config.rollouts,
        "errors": len(errors),
        "error_messages": sorted(set(errors))[:ERRORS_KEPT],
        "wall_s": wall_s,
        "turns_per_s": len(overhead) / wall_s if wall_s else 0.0,
        "overhead_ms": _spread(overhead),
        "server_ms": _spread(server),
        "ttft_ms": _spread(ttft),
        "connect_ms": _spread([s.connect_ms for s in sessions if not s.error]),
        "model_ms_first_turn": model_ms(config.ttft_ms, config.tps, 1),
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": median(values),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
    }


def _line(result: dict[str, Any]) -> str:
    over, server = result["overhead_ms"], result["server_ms"]
    line = (
        f"{result['connections']} connections, {result['turns']} turns, {result['errors']} errors, "
        f"overhead p50 {over['p50']:.2f} p99 {over['p99']:.2f} ms, server p50 {server['p50']:.2f} "
        f"p99 {server['p99']:.2f} ms"
    )
    if result["server_cpu_ms_per_turn"] is not None:
        line += f", server CPU {result['server_cpu_ms_per_turn']:.2f} ms/turn"
    if result["server_idle_cpu_ms_per_s"] is not None:
        line += f" (idle {result['server_idle_cpu_ms_per_s']:.1f} ms/s)"
    line += f", client {100 * result['client_cpu_share']:.0f}% of its cores"
    if result["limit"] == "load generator":
        line += " (the load generator was the limit, not the server)"
    return line


def floor_ratios(run: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    """hotloop's figures over the floor's (the same scenario against a server with no pipeline, bench/floor.py)."""
    return {
        "server_cpu_ms_per_turn": _ratio(run["server_cpu_ms_per_turn"], floor["server_cpu_ms_per_turn"]),
        "overhead_p50": _ratio(run["overhead_ms"]["p50"], floor["overhead_ms"]["p50"]),
        "overhead_p99": _ratio(run["overhead_ms"]["p99"], floor["overhead_ms"]["p99"]),
    }


def _ratio(a: float | None, b: float | None) -> float:
    """hotloop's figure over the floor's; NaN where the floor's is missing or not above zero (its overhead over a
    handful of turns can be 0 or a hair below, within the clock's jitter): no ratio means anything there."""
    return math.nan if a is None or b is None or b <= 0 else ratio(a, b)


def largest_under(runs: list[dict[str, Any]], target_ms: float, key: str = "overhead_ms") -> int | None:
    """The most connections whose run had no errors and a p99 below `target_ms` (None if no run did)."""
    passing = [run["connections"] for run in runs if run["errors"] == 0 and run[key]["p99"] < target_ms]
    return max(passing) if passing else None


def any_errors(result: dict[str, Any]) -> bool:
    return any(run["errors"] or (run.get("floor") or {}).get("errors") for run in result["runs"])


def load_result(config: LoadConfig, runs: list[dict[str, Any]], target_ms: float, workers: int) -> dict[str, Any]:
    """The whole result; `config` is that of the last run (the runs differ only in their connection count)."""
    settings = {**asdict(config), "connections": [run["connections"] for run in runs]}
    return {
        "scenario": "load",
        "config": {**settings, "workers": workers, "p99_target_ms": target_ms},
        "runs": runs,
        "largest_connections_under_target": largest_under(runs, target_ms),
        "largest_connections_under_target_server": largest_under(runs, target_ms, "server_ms"),
    }
