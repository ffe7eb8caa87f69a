"""Subagents really run at once (docs/benchmarks.md, "Subagents"): one multi-agent response on hotloop-sim whose
root spawns two subagents that each run a `--steps`-step loop, timed with `max_concurrent_subagents` 2 (together)
and 1 (one after the other), alternated, `--runs` times each. Prints the medians, their ratio, and the share of the
subagents' prompt tokens the simulated engine had cached (every step after an agent's first extends its own
rendered chain, so only each agent's first prompt is new).

`python scripts/bench_subagents.py [--steps 20] [--runs 5] [--ttft-ms 20] [--tps 1000]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench_idle import free_port, wait_ready
from websockets.sync.client import connect


def run_once(port: int, concurrent: int, args: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    metadata = {
        "sim_subagents": "2",
        "sim_subagent_steps": str(args.steps),
        "sim_tool_calls": "0",
        "sim_ttft_ms": str(args.ttft_ms),
        "sim_tps": str(args.tps),
        "sim_output_tokens": "16",
    }
    body = {
        "type": "response.create",
        "model": "hotloop-sim",
        "input": "Split the work in two.",
        "multi_agent": {"enabled": True, "max_concurrent_subagents": concurrent},
        "max_tool_calls": 4 * args.steps + 8,
        "metadata": metadata,
    }
    with connect(f"ws://127.0.0.1:{port}/v1/responses", max_size=None) as ws:
        started = time.perf_counter()
        ws.send(json.dumps(body))
        while True:
            frame = json.loads(ws.recv(timeout=300))
            if frame["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
                break
        elapsed = time.perf_counter() - started
    response = frame.get("response", {})
    assert response.get("status") == "completed", frame
    return elapsed, response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--tps", type=float, default=1000.0)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-m", "hotloop", "serve", "--port", str(port), "--workers", "1"]
        env_args = ["--data-dir", data, "--models", "hotloop-sim", "--default-model", "hotloop-sim"]
        server = subprocess.Popen([*command, *env_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(port)
            run_once(port, 2, args)  # warm: imports, the tokenizer, the sim's caches
            times: dict[int, list[float]] = {1: [], 2: []}
            cached = []
            for _ in range(args.runs):
                for concurrent in (2, 1):
                    elapsed, response = run_once(port, concurrent, args)
                    times[concurrent].append(elapsed)
                    usage = response["usage"]
                    cached.append(usage["input_tokens_details"]["cached_tokens"] / usage["input_tokens"])
        finally:
            server.terminate()
            server.wait(timeout=30)
    together, apart = statistics.median(times[2]), statistics.median(times[1])
    print(f"steps per subagent: {args.steps}; runs: {args.runs}; sim ttft {args.ttft_ms} ms, {args.tps} tok/s")
    print(f"together (max_concurrent_subagents 2): median {together * 1000:.0f} ms")
    print(f"one after the other (1):              median {apart * 1000:.0f} ms")
    print(f"together / apart: {together / apart:.2f}")
    print(f"cached share of all prompt tokens (root and subagents): median {statistics.median(cached):.3f}")


if __name__ == "__main__":
    main()
