"""A far client (`hotloop bench agent-loop --client-rtt-ms R,…`): the agent loop at each round-trip time R between
the bench's client and hotloop (bench/latency_proxy.py in between, R/2 each way; the MCP server of `--mcp` stays
next to hotloop, as it would in a deployment), and what each mode makes of R beside the physical limit.

The physical limit holds no RTT: the round trips are part of what the loop inside the server saves. Beside it, the
limit plus the round trips a mode cannot avoid: one per turn for a client-run loop (each turn's request goes out
and its events come back), one for the loop inside the server (its one create)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hotloop.bench.agent_config import AgentLoopConfig
from hotloop.bench.agent_loop import run_agent_loop
from hotloop.bench.progress import Progress
from hotloop.bench.stats import median, ratio
from hotloop.bench.target import far_client, root_url

if TYPE_CHECKING:
    from hotloop.bench.mcp_tools import McpToolProcess

PROBES = 10  # GET /healthz round trips timed per R, through the proxy and direct


async def run_rtt_sweep(
    base_url: str,
    config: AgentLoopConfig,
    rtts: Sequence[float],
    api_key: str | None = None,
    progress: Progress | None = None,
    mcp_server: McpToolProcess | None = None,
) -> dict[str, Any]:
    """The whole agent loop (every mode, warm-up and runs) at each R in turn, against the same hotloop."""
    progress = progress or Progress(enabled=False)
    points = []
    configs = []
    for rtt in rtts:
        how = f"latency proxy, {rtt / 2:g} ms each way" if rtt > 0 else "direct"
        progress.update(f"agent-loop with the client {rtt:g} ms away ({how})", final=True)
        # The proxy's process starts while nothing runs on this loop: the block is between measurements.
        with far_client(base_url, rtt) as url:
            measured = await measure_rtt(url, base_url) if rtt > 0 else None
            result = await run_agent_loop(url, config, api_key, progress, mcp_server)
        points.append(rtt_point(config, rtt, measured, result))
        configs.append(result["config"])
    return rtt_result(configs[0], points)


async def measure_rtt(url: str, direct_url: str, samples: int = PROBES) -> float | None:
    """The round trip through the proxy as a client sees it: the median GET /healthz through it less the direct
    one's (each on a keep-alive connection opened first); the proxy's own scheduling is in it. None if it fails."""
    import httpx

    async def timed(base: str) -> float:
        async with httpx.AsyncClient(timeout=30) as http:
            target = root_url(base, "/healthz")
            (await http.get(target)).raise_for_status()  # the connection, opened untimed
            times = []
            for _ in range(samples):
                start = time.perf_counter()
                (await http.get(target)).raise_for_status()
                times.append((time.perf_counter() - start) * 1000.0)
            return median(times)

    try:
        return await timed(url) - await timed(direct_url)
    except httpx.HTTPError:
        return None


def round_trips(config: AgentLoopConfig, mode: str) -> int:
    """The client's round trips in one rollout: a request per turn (mode inject: its create, then an inject per
    tool output, each waited for), or the loop inside the server's one create."""
    return 1 if mode == "mcp" else config.turns


def rtt_point(config: AgentLoopConfig, rtt: float, measured: float | None, result: dict[str, Any]) -> dict[str, Any]:
    """One R's figures per mode (medians over the runs) and its ratios to ws, with the agent loop's whole result."""
    modes: dict[str, Any] = {}
    ws = result["modes"].get("ws")
    for mode, data in result["modes"].items():
        m = data["median"]
        trips = round_trips(config, mode)
        floor = m["physical_ms"] + trips * rtt
        modes[mode] = {
            "e2e_ms": m["e2e_ms"],
            "physical_ms": m["physical_ms"],
            "e2e_over_physical": m["e2e_over_physical"],
            "round_trips": trips,
            "physical_plus_rtts_ms": floor,
            "e2e_over_physical_plus_rtts": ratio(m["e2e_ms"], floor),
            "excess_over_rtts_ms": m["e2e_ms"] - floor,
        }
    ratios = {}
    if ws is not None:
        for mode in modes:
            if mode != "ws":
                ratios[f"e2e {mode}/ws"] = ratio(modes[mode]["e2e_ms"], ws["median"]["e2e_ms"])
    return {
        "client_rtt_ms": rtt,
        "via_proxy": rtt > 0,
        "measured_rtt_ms": measured,
        "modes": modes,
        "ratios": ratios,
        "result": {key: value for key, value in result.items() if key != "config"},
    }


def rtt_result(config: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's JSON-ready result: the agent loop's config (every R runs the same) with the R's, and per R its
    point; `ratios` flattened with the R in each name."""
    config = {**config, "client_rtt_ms": [p["client_rtt_ms"] for p in points]}
    ratios = {f"R={p['client_rtt_ms']:g} ms: {name}": value for p in points for name, value in p["ratios"].items()}
    return {"scenario": "agent-loop", "config": config, "client_rtt": points, "ratios": ratios}
