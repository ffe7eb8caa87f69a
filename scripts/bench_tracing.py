"""What tracing costs a turn (docs/benchmarks.md, "Tracing"): the same WebSocket continuations through admission
(`admit`, where a response's trace begins) and `Turn.events()` on a built service (hotloop-sim, model time ~0),
with tracing off and on, side by side in one process, rounds alternated.

    .venv/bin/python scripts/bench_tracing.py [--rounds 6] [--turns 1500]

With tracing on, spans go over OTLP/HTTP to a receiver in another process that reads and drops them. Per turn it
reports the median wall time and the event loop thread's CPU (`time.thread_time()`: the spans a turn builds), and
the server process's CPU per turn (the exporter's thread, which encodes and sends them, included).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench_turn import continuation, started  # the same turns as scripts/bench_turn.py (run from the repository root)

from hotloop.config import Settings
from hotloop.pipeline.admission.entry import admit
from hotloop.wire.request import decode_create

WARMUP = 300


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_sink(ready: multiprocessing.Queue[int]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    ready.put(server.server_address[1])
    server.serve_forever()


async def run(settings: Settings, turns: int) -> tuple[float, float, float]:
    """Median wall and thread CPU per turn, and the process's CPU per turn (µs)."""
    service, session, options = started(settings)
    previous: str | None = None
    walls: list[float] = []
    cpus: list[float] = []
    process_start = 0.0
    for index in range(turns + WARMUP):
        if index == WARMUP:
            process_start = time.process_time()
        data = continuation(index, previous)
        wall, cpu = time.perf_counter(), time.thread_time()
        turn = await admit(service, session, decode_create(data), options)
        async for _ in turn.events():
            pass
        if index >= WARMUP:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        previous = turn.response.id
    await service.close()  # the exporter's last batch is sent here, inside the process's CPU
    process = (time.process_time() - process_start) / turns
    return statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6, process * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=1500)
    args = parser.parse_args()
    ready: multiprocessing.Queue[int] = multiprocessing.Queue()
    sink = multiprocessing.Process(target=serve_sink, args=(ready,), daemon=True)
    sink.start()
    port = ready.get(timeout=30)
    base = {
        "models": ["hotloop-sim"],
        "default_model": "hotloop-sim",
        "sim_ttft_ms": 0.0,
        "sim_tps": 1e9,
        "log_level": "warning",
    }
    kinds = {"off": {}, "on": {"otel_endpoint": f"http://127.0.0.1:{port}"}}
    figures: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind, extra in kinds.items():
            settings = Settings(data_dir=tempfile.mkdtemp(), **base, **extra)  # type: ignore[arg-type]
            figures[kind].append(asyncio.run(run(settings, args.turns)))
    sink.terminate()
    print(f"{args.rounds} rounds of {args.turns} turns each way, alternated; medians over the rounds, µs per turn")
    print("| tracing | wall | event loop thread CPU | process CPU |")
    print("|---|---|---|---|")
    for kind in kinds:
        wall, cpu, process = (statistics.median(column) for column in zip(*figures[kind], strict=True))
        print(f"| {kind} | {wall:.0f} | {cpu:.0f} | {process:.0f} |")


if __name__ == "__main__":
    main()
