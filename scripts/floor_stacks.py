"""The floor under other Python servers (docs/benchmarks-history.md, "The stack under a turn"): the `bench load --floor`
server (bench/floor.py: the recorded events of a hotloop rollout, replayed on the simulated model's clock with no
pipeline) on uvicorn as `hotloop serve` runs it, and on granian's ASGI interface, measured side by side in one run.

    .venv/bin/pip install granian    # not a dependency of hotloop: this experiment's alone
    .venv/bin/python scripts/floor_stacks.py [--connections 50] [--turns 20] [--rounds 2]

One rollout is recorded from a fresh `hotloop serve` (hotloop-sim); then each round loads every stack in turn, each
a fresh server process of one worker on the same cores (the load generator on the others, bench/cores.py). Prints
the server's CPU per turn and the overhead percentiles per stack and round, and each stack's CPU against uvicorn's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from hotloop.bench.cores import pinned, split
from hotloop.bench.floor import Conversation, FloorApp
from hotloop.bench.load import run_load
from hotloop.bench.load_config import LoadConfig
from hotloop.bench.recording import Recording, record_rollout
from hotloop.bench.server_process import ChildServer, FloorProcess, ServerProcess
from hotloop.bench.stats import median

RECORDING_ENV = "HOTLOOP_FLOOR_RECORDING"


def floor_app() -> FloorApp:
    """granian's `--factory` target: the floor app over the recording the environment names."""
    return FloorApp(Recording.load(Path(os.environ[RECORDING_ENV])))


class RSGIFloor:
    """The floor app on granian's own interface (RSGI): the same replay, each frame one `send_str`."""

    def __init__(self, app: FloorApp) -> None:
        self.app = app

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto == "http":
            status, body = (200, "ok") if scope.path == "/healthz" else (404, "not found")
            protocol.response_str(status, [("content-type", "text/plain")], body)
            return
        if scope.proto != "ws":
            return
        transport = await protocol.accept()

        async def send(message: dict[str, Any]) -> None:
            await transport.send_str(message["text"])

        conversation = Conversation()
        while True:
            message = await transport.receive()
            if message.kind == 0:  # close
                break
            await self.app.frame(message.data, conversation, send)
        protocol.close(1000)


def rsgi_app() -> RSGIFloor:
    return RSGIFloor(floor_app())


class GranianFloor(ChildServer):
    """The floor app under granian (uvloop, one worker) on its ASGI interface, as FloorProcess runs it under
    uvicorn, or on RSGI."""

    interface = "asgi"
    target = "floor_stacks:floor_app"

    def __init__(self, recording: Recording, cpus: frozenset[int] | None) -> None:
        super().__init__("hotloop-floor-granian-", cpus)
        path = self.directory / "recording.json"
        recording.save(path)
        granian = str(Path(sys.executable).parent / "granian")
        command = [granian, "--interface", self.interface, "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--workers", "1", "--loop", "uvloop", "--log-level", "warning", "--factory", self.target]
        scripts = str(Path(__file__).resolve().parent)
        env = {
            **os.environ,
            RECORDING_ENV: str(path),
            "PYTHONPATH": scripts + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        self._spawn(command, env)


class GranianRSGIFloor(GranianFloor):
    interface = "rsgi"
    target = "floor_stacks:rsgi_app"


STACKS = {"uvicorn": FloorProcess, "granian-asgi": GranianFloor, "granian-rsgi": GranianRSGIFloor}


def load(stack: str, recording: Recording, config: LoadConfig, cpus: frozenset[int] | None) -> dict[str, Any]:
    with STACKS[stack](recording, cpus) as server:
        job = run_load(server.base_url, config, None, None, server.pid, cpt=recording.chars_per_token, label=stack)
        return asyncio.run(job)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    config = LoadConfig(connections=args.connections, turns=args.turns, idle_s=0)
    cores = split()
    server_cpus = cores.server if cores is not None else None
    results: dict[str, list[dict[str, Any]]] = {stack: [] for stack in STACKS}
    with pinned(cores.client if cores is not None else None):
        with ServerProcess(server_cpus, workers=1, max_connections=args.connections + 16) as hotloop:
            recording = asyncio.run(record_rollout(hotloop.base_url, config, None))
        for round_ in range(args.rounds):
            order = list(STACKS)[round_ % len(STACKS) :] + list(STACKS)[: round_ % len(STACKS)]
            for stack in order:
                run = load(stack, recording, config, server_cpus)
                results[stack].append(run)
                print(
                    f"round {round_ + 1} {stack:<13} CPU {run['server_cpu_ms_per_turn']:.3f} ms/turn, overhead p50 "
                    f"{run['overhead_ms']['p50']:.2f} / p99 {run['overhead_ms']['p99']:.2f} ms, errors {run['errors']}",
                    flush=True,
                )
    base = median(run["server_cpu_ms_per_turn"] for run in results["uvicorn"])
    print(
        f"\n{args.connections} connections x {args.turns} turns, {args.rounds} rounds; load average {os.getloadavg()}"
    )
    for stack, runs in results.items():
        cpu = median(run["server_cpu_ms_per_turn"] for run in runs)
        print(f"  {stack:<13} CPU {cpu:.3f} ms/turn (median), {cpu / base:.2f}x uvicorn's")


if __name__ == "__main__":
    main()
