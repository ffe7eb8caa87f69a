"""Benchmark output: the terminal tables, the JSON file and the PNG plot."""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def environment() -> dict[str, Any]:
    """Where the numbers come from: hotloop's commit (and whether the tree was dirty), the machine, the date."""
    root = Path(__file__).resolve().parents[3]
    commit, dirty, diff_sha = "unknown", None, None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        dirty = bool(status.strip())
        if dirty:  # identifies the uncommitted changes the numbers were taken with
            diff = subprocess.run(
                ["git", "--no-optional-locks", "diff", "HEAD"], cwd=root, capture_output=True, timeout=10, check=True
            ).stdout
            diff_sha = hashlib.sha256(diff).hexdigest()[:12]
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "dirty": dirty,
        "diff_sha256": diff_sha,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        )
    return "\n".join(lines)


def agent_loop_table(result: dict[str, Any]) -> str:
    config = result["config"]
    upstream = config.get("upstream")
    pacing = f"prefill {config['prefill_us_per_token']:g} us/token" if upstream else f"ttft {config['ttft_ms']:g} ms"
    head = (
        f"agent-loop: {config['turns']} turns, context to ~{config['context_tokens']} tokens, "
        f"{config['tps']:g} tok/s, {pacing}, tool {config['tool_ms']:g} ms, "
        f"medians over {config['runs']} run(s)" + (f", hotloop in front of {upstream}" if upstream else "")
    )
    tools = config.get("tools") or ["function"]
    if tools != ["function"] or config.get("deferred"):
        head += f"\ntools: {' and '.join(tools)}" + (
            f", {config['deferred']} more deferred (defer_loading) with a server-run tool_search"
            if config.get("deferred")
            else ""
        )
    header = [
        "mode",
        "e2e s",
        "limit s",
        "e2e/limit",
        "turns",
        "ttft ms",
        "overhead ms",
        "first ms",
        "last ms",
        "ctx last",
    ]
    rows = []
    for mode, data in result["modes"].items():
        m = data["median"]
        rows.append(
            [
                mode,
                fmt(m["e2e_ms"] / 1000, 3),
                fmt(m["physical_ms"] / 1000, 3),
                fmt(m["e2e_over_physical"], 3),
                str(m["turns_completed"]),
                fmt(m["ttft_ms"], 2),
                fmt(m.get("overhead_ms"), 2),
                fmt(m.get("overhead_first_turn_ms"), 2),
                fmt(m.get("overhead_last_turn_ms"), 2),
                str(m["context_last_turn_tokens"]),
            ]
        )
    ratios = "\n".join(f"  {name}: {fmt(value, 3)}" for name, value in result["ratios"].items())
    model = "(ttft + (output_tokens-1)/tps)"
    if upstream:
        model = "(the engine's own time where it reports one, else uncached input x prefill + (output_tokens-1)/tps)"
    legend = f"overhead = turn time seen by the client - model time {model}; first/last: at the first/last turn"
    text = f"{head}\n{table(header, rows)}\n{legend}\nratios (medians):\n{ratios}"
    text += _compaction_table(result) + _mcp_table(result) + _inject_table(result) + _tools_lines(result)
    return text + ("\n" + cached_table(result) if upstream else "")


def _tools_lines(result: dict[str, Any]) -> str:
    """The calls the client answered per mode (--tools typed: shell_call, apply_patch_call), and with --deferred
    what deferring the tools saved in the first turn's prompt and what the loop's first turn searched."""
    config = result["config"]
    if (config.get("tools") or ["function"]) == ["function"] and not config.get("deferred"):
        return ""
    lines = ["\ncalls answered (all runs):"]
    for mode, data in result["modes"].items():
        calls = ", ".join(f"{name} {count}" for name, count in sorted((data.get("calls") or {}).items()))
        lines.append(f"  {mode}: {calls or '-'}")
    saved = result.get("deferred")
    if saved:
        lines.append(
            f"deferred tools ({saved['tools']}): first-turn prompt {saved['input_tokens_deferred']} tokens deferred vs "
            f"{saved['input_tokens_inline']} inline: {saved['saved_tokens']} saved "
            f"({fmt(100 * saved['saved_ratio'], 1)}%; usage.input_tokens, one request each, answered in text)"
        )
        for mode, data in result["modes"].items():
            m = data["median"]
            if "searches" in m:
                lines.append(
                    f"  {mode}: {fmt(m['searches'], 0)} search(es) loading {fmt(m['loaded_tools'], 0)} tools; "
                    f"first turn {m['context_first_turn_tokens']} input tokens (search + call: two generations), "
                    f"overhead {fmt(m['overhead_first_turn_ms'], 2)} ms"
                )
    return "\n".join(lines)


def _compaction_table(result: dict[str, Any]) -> str:
    """A long session's compaction (`--compact-threshold`): how often, what a compacting turn's overhead is beside
    the others', and the share of the next prompt the model's cache held."""
    rows = []
    for mode, data in result["modes"].items():
        m = data["median"]
        if "compactions" in m:
            cached = m["cached_ratio_after_compaction"]
            rows.append(
                [
                    mode,
                    fmt(m["compactions"], 0),
                    fmt(m["overhead_compacting_turn_ms"], 2),
                    fmt(m["overhead_other_turns_ms"], 2),
                    "-" if cached is None else fmt(cached, 3),
                    str(m["context_max_tokens"]),
                ]
            )
    if not rows:
        return ""
    header = ["mode", "compactions", "compacting ms", "other ms", "cached after", "ctx max"]
    return "\ncompaction (overhead per turn, medians):\n" + table(header, rows)


def _mcp_table(result: dict[str, Any]) -> str:
    """`--mcp`: the loop in the server beside the client-run one, and hotloop's time per MCP step."""
    modes = result["modes"]
    if "mcp" not in modes:
        return ""
    m = modes["mcp"]["median"]
    mcp = m["mcp"]
    rows = [
        [mode, fmt(modes[mode]["median"]["excess_ms"], 1), fmt(modes[mode]["median"]["excess_per_step_ms"], 2)]
        for mode in modes
    ]
    lines = [
        f"\nloop in the server (mcp: {int(mcp['steps'])} MCP calls inside one response, {int(mcp['generations'])} "
        "generations) beside the client-run loops; excess = e2e - limit:",
        table(["mode", "excess ms", "per step ms"], rows),
        "hotloop's own time per MCP step (medians, ms; from hotloop:timing_metrics and the MCP server's clock):",
        f"  prompt extension (mcp_step)                    {fmt(mcp['extension_per_step_ms'], 3)}",
        f"  call dispatch beyond the MCP server's request  {fmt(mcp['dispatch_per_step_ms'], 3)}",
        f"  = hotloop per step                             {fmt(mcp['hotloop_per_step_ms'], 3)}",
        f"  MCP server SDK per call (request - tool)       {fmt(mcp['server_sdk_per_call_ms'], 3)}",
        f"  all beyond the tool's own time per step        {fmt(mcp['beyond_tool_per_step_ms'], 3)}",
        f"  tool list: first create {fmt(mcp['list_first_ms'], 3)}, cached (a continuation) "
        f"{fmt(mcp['list_cached_ms'], 3)}; tools/list requests per run {fmt(mcp['tools_list_requests'], 0)}",
        f"  MCP server answers with {'JSON bodies' if result['config'].get('mcp_json_response') else 'event streams'}"
        f"; TCP connections per run {fmt(mcp['tcp_connections'], 0)}",
    ]
    return "\n".join(lines)


def _inject_table(result: dict[str, Any]) -> str:
    """Mode `inject`: the loop as one multi-agent response beside the ws loop, hotloop's own time per step."""
    modes = result["modes"]
    injects = [mode for mode in modes if mode.split("+")[0] == "inject"]
    if not injects:
        return ""
    keys = ("overhead_ms", "overhead_tool_steps_ms", "to_first_output_overhead_ms", "overhead_last_turn_ms")
    rows = []
    for mode in injects:
        for name in ("ws" + mode[len("inject") :], mode):
            if name in modes:
                m = modes[name]["median"]
                rows.append([name, fmt(m["e2e_ms"] / 1000, 3), *(fmt(m.get(key), 2) for key in keys)])
    lines = ["\nthe loop as one multi-agent response (inject) beside the ws loop; medians:"]
    lines.append(table(["mode", "e2e s", "per turn ms", "per tool step ms", "to 1st output ms", "last ms"], rows))
    for mode in injects:
        measured = modes[mode]["median"]["inject"]
        lines.append(
            f"  {mode}: {fmt(measured['responses_created'], 0)} response created a run, "
            f"{fmt(measured['steps'], 0)} injects, {fmt(measured['generations'], 0)} generations;\n"
            f"    response.inject.created {fmt(measured.get('ack_ms'), 2)} ms after the inject; prompt extension "
            f"(mcp_step) {fmt(measured['extension_per_step_ms'], 2)} ms a step"
        )
    lines.append(
        "per turn: turn (ws: create to terminal; inject: create or inject to the call's output_item.done, the last "
        "to terminal) - model time;\nper tool step: all turns but the first; to 1st output: ttft seen - sim ttft"
    )
    return "\n".join(lines)


def cached_table(result: dict[str, Any]) -> str:
    """Per turn: the context and the share of it the engine found in its prefix cache, per mode."""
    modes = list(result["modes"])
    header = ["turn", *(f"{mode} {stat}" for mode in modes for stat in ("ctx", "cached"))]
    rows = []
    turns = min(len(result["modes"][mode]["per_turn_median"]) for mode in modes)
    for index in range(turns):
        row = [str(index)]
        for mode in modes:
            entry = result["modes"][mode]["per_turn_median"][index]
            row += [str(entry["context_tokens"]), f"{entry['cached_ratio'] * 100:.1f}%"]
        rows.append(row)
    return "cached-token ratio per turn (engine prefix cache hits / prompt tokens, medians):\n" + table(header, rows)


def overhead_table(result: dict[str, Any]) -> str:
    modes = result["config"]["modes"]
    header = ["context", *(f"{mode} {stat}" for mode in modes for stat in ("p50 ms", "p90 ms"))]
    rows = []
    for entry in result["sizes"]:
        data = entry["modes"]
        rows.append(
            [
                str(entry["context_tokens"]),
                *(fmt(data[mode][stat], 2) for mode in modes for stat in ("median_ms", "p90_ms")),
            ]
        )
    ratios = "\n".join(f"  {name}: {fmt(value, 3)}" for name, value in result["ratios"].items())
    head = f"overhead: per-turn time of a small continuation, {result['config']['samples']} samples per mode and size"
    return f"{head}\n{table(header, rows)}\nratios (medians):\n{ratios}"


def load_table(result: dict[str, Any]) -> str:
    config = result["config"]
    upstream = (config.get("upstream") or {}).get("upstream")
    model = f"hotloop in front of {upstream}" if upstream else f"{config['tps']:g} tok/s, ttft {config['ttft_ms']:g} ms"
    head = (
        f"load: WebSocket agent sessions, {config['rollouts']} x {config['turns']} turns each, context to "
        f"~{config['context_tokens']} tokens, {model}, tool {config['tool_ms']:g} ms, "
        f"store {str(config['store']).lower()}, {config['workers']} server worker(s)"
    )
    header = ["connections", "turns", "errors", "overhead p50/p99 ms", "server p50/p99 ms", "connect p50/p99 ms"]
    header += ["ttft p50 ms"]
    header += ["turns/s", "server CPU s", "CPU ms/turn", "CPU %", "idle CPU ms/s", "peak RSS MiB", "client CPU s"]
    header += ["wall s", "loadavg"]
    rows = []
    for run in result["runs"]:
        rows.append(_load_row(run, str(run["connections"])))
        if run.get("floor"):
            rows.append(_load_row(run["floor"], f"{run['connections']} floor"))
    target = config["p99_target_ms"]
    largest = result["largest_connections_under_target"]
    largest_server = result["largest_connections_under_target_server"]
    legend = (
        "overhead = turn time seen by the client - model time; server = pre_inference + post_inference of the "
        "hotloop:timing_metrics event; connect: WebSocket opening handshake; CPU ms/turn: the server's CPU over "
        "the turns completed; idle CPU: the server's with no traffic, before the load; loadavg: the machine's "
        "1-minute load average before/after the run"
    )
    verdict = (
        f"largest connection count with no errors and p99 < {target:g} ms: overhead {largest or 'none'}, "
        f"server {largest_server or 'none'}"
    )
    errors = [message for run in result["runs"] for message in run["error_messages"]]
    errors += [message for run in result["runs"] for message in (run.get("floor") or {}).get("error_messages", [])]
    tail = "".join(f"\n  error: {message}" for message in errors[:10])
    return f"{head}\n{table(header, rows)}\n{legend}\n{verdict}{_cores_lines(result)}{_floor_lines(result)}{tail}"


def _cores_lines(result: dict[str, Any]) -> str:
    """Where each side ran, how busy each kept its cores, and the runs the load generator held back."""
    lines = []
    for run in result["runs"]:
        cores = run.get("cores") or {}
        server = run.get("server_cpu_share")
        busy = f"server {100 * server:.0f}%" if server is not None else "server ?"
        line = (
            f"\n{run['connections']} connections: server on cores {cores.get('server') or '?'}, load generator on "
            f"{cores.get('client') or '?'}; busy {busy}, load generator {100 * run['client_cpu_share']:.0f}% "
            f"of their cores; limit: {run['limit']}"
        )
        lines.append(line)
    return "".join(lines)


def _load_row(run: dict[str, Any], name: str) -> list[str]:
    over, server = run["overhead_ms"], run["server_ms"]
    return [
        name,
        f"{run['turns']}/{run['turns_expected']}",
        str(run["errors"]),
        f"{fmt(over['p50'], 2)} / {fmt(over['p99'], 2)}",
        f"{fmt(server['p50'], 2)} / {fmt(server['p99'], 2)}",
        f"{fmt(run['connect_ms']['p50'], 0)} / {fmt(run['connect_ms']['p99'], 0)}",
        fmt(run["ttft_ms"]["p50"], 2),
        fmt(run["turns_per_s"], 0),
        fmt(run["server_cpu_s"], 2),
        fmt(run.get("server_cpu_ms_per_turn"), 2),
        fmt(run["server_cpu_percent"], 0),
        fmt(run.get("server_idle_cpu_ms_per_s"), 1),
        fmt(run["server_peak_rss_mib"], 0),
        fmt(run["client_cpu_s"], 2),
        fmt(run["wall_s"], 2),
        "/".join(fmt(value, 1) for value in run["loadavg_1m"]),
    ]


def _floor_lines(result: dict[str, Any]) -> str:
    """hotloop / floor per connection count, where --floor ran."""
    lines = []
    for run in result["runs"]:
        ratios = run.get("vs_floor")
        if ratios:
            lines.append(
                f"\n  {run['connections']} connections: server CPU ms/turn "
                f"{fmt(ratios['server_cpu_ms_per_turn'], 2)}x, overhead p50 {fmt(ratios['overhead_p50'], 2)}x, "
                f"p99 {fmt(ratios['overhead_p99'], 2)}x"
            )
    if not lines:
        return ""
    legend = "\nhotloop / floor (floor: the same stack and scenario with no pipeline, replaying recorded events):"
    return legend + "".join(lines)


def write_json(result: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps({**result, "environment": environment()}, indent=1, allow_nan=True) + "\n")


_COLORS = {"http-full": "#d62728", "http-chain": "#ff7f0e", "ws": "#1f77b4", "inject": "#9467bd"}


def plot_agent_loop(result: dict[str, Any], path: str) -> None:
    """Overhead per turn against context tokens for each mode, and e2e per mode with the physical limit marked."""
    matplotlib = needs_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = result["config"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    for mode, data in result["modes"].items():
        xs = [t["context_tokens"] for t in data["per_turn_median"]]
        ys = [t["overhead_ms"] for t in data["per_turn_median"]]
        style = "-" if "+" not in mode else "--"  # another tool set: the mode's colour, dashed
        color = _COLORS.get(mode.split("+")[0])
        left.plot(xs, ys, marker=".", markersize=3, linewidth=1, label=mode, color=color, linestyle=style)
    left.set_xlabel("context (tokens, usage.input_tokens)")
    left.set_ylabel("overhead per turn (ms, median)")
    left.set_title("per-turn overhead = turn time - model time", fontsize=10)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    names = list(result["modes"])
    e2e = [result["modes"][m]["median"]["e2e_ms"] / 1000 for m in names]
    physical = max(result["modes"][m]["median"]["physical_ms"] for m in names) / 1000
    bars = right.bar(names, e2e, color=[_COLORS.get(m.split("+")[0], "#888888") for m in names])
    right.axhline(physical, color="black", linestyle="--", linewidth=1, label=f"physical limit {physical:.2f} s")
    for bar, value in zip(bars, e2e, strict=True):
        right.annotate(
            f"{value:.2f} s\n{value / physical:.3f}x",
            (bar.get_x() + bar.get_width() / 2, value),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.set_ylabel("end-to-end (s, median)")
    right.set_ylim(0, max(e2e) * 1.2)
    right.set_title("agent loop end-to-end", fontsize=10)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"{config['turns']} turns to ~{config['context_tokens']} tokens, {config['tps']:g} tok/s, "
        f"ttft {config['ttft_ms']:g} ms, tool {config['tool_ms']:g} ms",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_overhead(result: dict[str, Any], path: str) -> None:
    """Median (and p90, dashed) overhead per turn against history size for each mode."""
    matplotlib = needs_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 4))
    for mode in result["config"]["modes"]:
        xs = [entry["modes"][mode]["history_tokens"] for entry in result["sizes"]]
        color = _COLORS.get(mode)
        axis.plot(xs, [e["modes"][mode]["median_ms"] for e in result["sizes"]], marker="o", label=mode, color=color)
        axis.plot(xs, [e["modes"][mode]["p90_ms"] for e in result["sizes"]], linestyle="--", color=color, alpha=0.5)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("history (tokens)")
    axis.set_ylabel("overhead per turn (ms): median, p90 dashed")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def needs_matplotlib() -> Any:
    """matplotlib, which `--plot` draws with: an extra (`hotloop[bench]`), not in the server's own install."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("hotloop bench: --plot needs matplotlib: pip install 'hotloop[bench]'") from None
    return matplotlib
