"""One WebSocket continuation's cost in-process: decode, `start_turn` and `Turn.events()` on a built service
(hotloop-sim, model time ~0), 3 000 turns in chains of 200, the median after 500 warm-up turns. Compare commits by
running it with `PYTHONPATH=<worktree>/src` (docs/benchmarks-history.md).

    .venv/bin/python scripts/bench_turn.py LABEL
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from typing import Any

import msgspec

from hotloop.config import Settings
from hotloop.pipeline.prepare import start_turn
from hotloop.pipeline.prepared import TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.session import Session
from hotloop.transports.app import build_service
from hotloop.wire.request import decode_create

TURNS, CHAIN, WARMUP = 3000, 200, 500


def started(settings: Settings) -> tuple[Service, Session, TurnOptions]:
    """A started service, one caching session on it, and a WebSocket turn's options."""
    service = build_service(settings)
    service.start()
    return (
        service,
        service.session("owner", caching=True),
        TurnOptions(websocket=True, lane=None, transport="websocket"),
    )


def continuation(index: int, previous: str | None) -> bytes:
    """The `index`th turn's `response.create`: chains of CHAIN turns, each continuing the one before."""
    body: dict[str, Any] = {
        "type": "response.create",
        "model": "hotloop-sim",
        "input": [{"role": "user", "content": f"continue {index} " + "x" * 200}],
        "store": False,
        "metadata": {"sim_output_tokens": "20", "sim_tool_calls": "0"},
    }
    if previous and index % CHAIN:
        body["previous_response_id"] = previous
    return msgspec.json.encode(body)


async def main(label: str) -> None:
    settings = Settings(
        data_dir=tempfile.mkdtemp(),
        models=["hotloop-sim"],
        default_model="hotloop-sim",
        sim_ttft_ms=0.0,
        sim_tps=1e9,
        log_level="warning",
    )
    service, session, options = started(settings)
    previous: str | None = None
    times: list[float] = []
    for index in range(TURNS):
        data = continuation(index, previous)
        start = time.perf_counter()
        turn = await start_turn(service, session, decode_create(data), options)
        async for _ in turn.events():
            pass
        times.append(time.perf_counter() - start)
        previous = turn.response.id
    await service.close()
    kept = times[WARMUP:]
    print(f"{label}: median {statistics.median(kept) * 1e6:.0f} us, mean {statistics.mean(kept) * 1e6:.0f} us")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "now"))
