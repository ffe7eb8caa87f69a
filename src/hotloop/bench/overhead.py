"""The overhead scenario: per-turn server overhead of small continuations against histories of growing size."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hotloop.bench.chars import chars_per_token
from hotloop.bench.clients import BenchError, ModeClient, open_client
from hotloop.bench.progress import Progress
from hotloop.bench.scenario import INSTRUCTIONS, MODEL, TOOLS, shaped_history, sim_metadata, sized_history, user_message
from hotloop.bench.stats import median, percentile, ratio

FAST_TPS = 1_000_000.0  # model time ≈ 0: what is left of a turn is overhead
CONTINUE = "Continue."


@dataclass(frozen=True)
class OverheadConfig:
    context_tokens: tuple[int, ...] = (1000, 10_000, 100_000)
    samples: int = 30
    modes: tuple[str, ...] = ("http-full", "http-chain", "ws")
    output_tokens: int = 4
    history: str = "tools"  # scenario.HISTORY_SHAPES


def request_fields(config: OverheadConfig) -> dict[str, Any]:
    # tools are declared (a realistic prompt) but K = 0, so the simulator answers with `output_tokens` words.
    return {
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "tools": TOOLS,
        "parallel_tool_calls": False,
        "metadata": sim_metadata(0.0, FAST_TPS, 0, config.output_tokens),
    }


async def run_overhead(
    base_url: str, config: OverheadConfig, api_key: str | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """For each size: one history per mode, then `samples` small continuations, alternating between the modes."""
    progress = progress or Progress(enabled=False)
    cpt = await chars_per_token(base_url, api_key)
    fields = request_fields(config)
    sizes: list[dict[str, Any]] = []
    warm = await _open_all(config.modes, base_url, fields, api_key)
    try:
        for client in warm:
            await client.turn(sized_history(500, cpt))
            await client.turn([user_message(CONTINUE)])
    finally:
        for client in warm:
            await client.close()
    for size in config.context_tokens:
        history = shaped_history(config.history, size, cpt)
        clients = await _open_all(config.modes, base_url, fields, api_key)
        samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in config.modes}
        built: dict[str, int] = {}
        try:
            for client in clients:
                progress.update(f"overhead {size} tokens: building the history ({client.mode})")
                first = await client.turn(history)
                built[client.mode] = first.input_tokens
            for index in range(config.samples):
                progress.update(f"overhead {size} tokens: sample {index + 1}/{config.samples}")
                for client in clients:
                    result = await client.turn([user_message(CONTINUE)])
                    if result.status != "completed":
                        raise BenchError(f"{client.mode}: response {result.response_id} is {result.status}")
                    own = max(0, result.output_tokens - 1) / FAST_TPS * 1000.0
                    samples[client.mode].append(
                        {
                            "context_tokens": result.input_tokens,
                            "ttft_ms": None if result.ttft_s is None else result.ttft_s * 1000.0,
                            "turn_ms": result.turn_s * 1000.0,
                            "overhead_ms": result.turn_s * 1000.0 - own,
                            "timings": result.timings,
                        }
                    )
        finally:
            for client in clients:
                await client.close()
        modes = {}
        for mode, rows in samples.items():
            overheads = [row["overhead_ms"] for row in rows]
            ttfts = [row["ttft_ms"] for row in rows if row["ttft_ms"] is not None]
            modes[mode] = {
                "history_tokens": built[mode],
                "median_ms": median(overheads),
                "p90_ms": percentile(overheads, 90),
                "ttft_median_ms": median(ttfts),
                "samples": rows,
            }
        sizes.append({"context_tokens": size, "modes": modes})
        summary = ", ".join(f"{mode} {data['median_ms']:.2f} ms" for mode, data in modes.items())
        progress.update(f"overhead {size} tokens: median {summary}", final=True)
    progress.done()
    return {
        "scenario": "overhead",
        "config": {**asdict(config), "context_tokens": list(config.context_tokens), "modes": list(config.modes)},
        "chars_per_token": cpt,
        "sizes": sizes,
        "ratios": _ratios(sizes, config.modes),
    }


async def _open_all(
    modes: tuple[str, ...], base_url: str, fields: dict[str, Any], api_key: str | None
) -> list[ModeClient]:
    return [await open_client(mode, base_url, fields, api_key) for mode in modes]


def _ratios(sizes: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for entry in sizes:
        data = entry["modes"]
        for other in ("http-full", "http-chain"):
            if "ws" in data and other in data:
                out[f"{entry['context_tokens']}: ws/{other}"] = ratio(data["ws"]["median_ms"], data[other]["median_ms"])
    if len(sizes) >= 2:
        for mode in modes:
            first, last = sizes[0]["modes"][mode]["median_ms"], sizes[-1]["modes"][mode]["median_ms"]
            out[f"{mode}: {sizes[-1]['context_tokens']}/{sizes[0]['context_tokens']}"] = ratio(last, first)
    return out
