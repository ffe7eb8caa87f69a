"""A far client's output (`--client-rtt-ms`, bench/rtt.py): the table per R and mode, and the plot of e2e against R."""

from __future__ import annotations

from typing import Any

from hotloop.bench.report import fmt, needs_matplotlib, table

COLORS = {"http-full": "#d62728", "http-chain": "#ff7f0e", "ws": "#1f77b4", "mcp": "#2ca02c", "inject": "#9467bd"}


def rtt_table(result: dict[str, Any]) -> str:
    config = result["config"]
    head = (
        f"agent-loop with a far client: {config['turns']} turns, context to ~{config['context_tokens']} tokens, "
        f"{config['tps']:g} tok/s, ttft {config['ttft_ms']:g} ms, tool {config['tool_ms']:g} ms, medians over "
        f"{config['runs']} run(s); RTT R through a latency proxy (R/2 each way; R=0 direct), the MCP server next to "
        "hotloop"
    )
    header = ["R ms", "measured", "mode", "e2e s", "limit s", "e2e/limit", "trips", "limit+trips*R s", "e2e/that"]
    header += ["e2e/ws"]
    rows = []
    for point in result["client_rtt"]:
        ws = point["modes"].get("ws")
        for mode, m in point["modes"].items():
            rows.append(
                [
                    f"{point['client_rtt_ms']:g}",
                    fmt(point["measured_rtt_ms"], 2),
                    mode,
                    fmt(m["e2e_ms"] / 1000, 3),
                    fmt(m["physical_ms"] / 1000, 3),
                    fmt(m["e2e_over_physical"], 3),
                    str(m["round_trips"]),
                    fmt(m["physical_plus_rtts_ms"] / 1000, 3),
                    fmt(m["e2e_over_physical_plus_rtts"], 3),
                    fmt(m["e2e_ms"] / ws["e2e_ms"], 3) if ws else "-",
                ]
            )
    legend = (
        "limit = model time + tool time (no RTT in it); trips: the client's round trips a rollout (a request per "
        "turn; inject: its create and each inject; mcp: its one create); measured: GET /healthz through the proxy "
        "less direct, ms"
    )
    return f"{head}\n{table(header, rows)}\n{legend}"


def plot_rtt(result: dict[str, Any], path: str) -> None:
    """e2e against R per mode (the limit, and limit + trips x R dashed), and e2e / limit against R."""
    matplotlib = needs_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["client_rtt"]
    rtts = [p["client_rtt_ms"] for p in points]
    modes = list(points[0]["modes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in modes:
        rows = [p["modes"][mode] for p in points]
        color = COLORS.get(mode.split("+")[0])
        left.plot(rtts, [m["e2e_ms"] / 1000 for m in rows], marker="o", label=mode, color=color)
        left.plot(rtts, [m["physical_plus_rtts_ms"] / 1000 for m in rows], linestyle="--", color=color, alpha=0.5)
        right.plot(rtts, [m["e2e_over_physical"] for m in rows], marker="o", label=mode, color=color)
    limit = points[0]["modes"][modes[0]]["physical_ms"] / 1000
    left.axhline(limit, color="black", linestyle=":", linewidth=1, label=f"physical limit {limit:.2f} s")
    left.set_xlabel("client RTT R (ms)")
    left.set_ylabel("end-to-end (s, median)")
    left.set_title("e2e; dashed: limit + round trips x R", fontsize=10)
    left.set_ylim(bottom=0)
    right.axhline(1.0, color="black", linestyle=":", linewidth=1)
    right.set_xlabel("client RTT R (ms)")
    right.set_ylabel("e2e / physical limit")
    right.set_title("e2e / limit (the limit holds no RTT)", fontsize=10)
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    config = result["config"]
    fig.suptitle(
        f"a far client: {config['turns']} turns to ~{config['context_tokens']} tokens, {config['tps']:g} tok/s, "
        f"ttft {config['ttft_ms']:g} ms, tool {config['tool_ms']:g} ms",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
