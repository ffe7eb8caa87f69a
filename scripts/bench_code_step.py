"""What a code_interpreter run inside a response costs beyond the code's own run time (issue 40's target: <= 15 ms
p50 on a warm container), and how long a new container takes to be ready (<= 300 ms p50).

A manual benchmark, never run in CI. One hotloop server (hotloop-sim, SQLite, in this process on a thread). Each
run is a response whose model runs exactly `--code` (metadata `sim_code`, default `pass`: no run time of its own)
in the container the previous response used, then answers. Timed where they run (wrapped with a clock here):

- `kernel`: `Container.python`, the sandbox's call: the code sent to the kernel, run, its reply read;
- `step`: `CodeRuntime.run`, the whole run as the response's step does it: the container checked in the store, the
  call, the files the code wrote kept, `last_active_at` moved;
- `response`: the client's whole `responses.create` (two generations and the run between them), beside a response
  with no tool (one generation) for scale.

`step - kernel` is hotloop's own cost around the kernel; `step` is what the target bounds (the code's own time is ~0
for `pass`). A new container: the first run of an `auto` tool with no container yet (the store's record, the
sandbox opened, its kernel started, the code run).

    .venv/bin/python scripts/bench_code_step.py --runs 50
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import start_server  # the tests' in-process server
from hotloop.pipeline.containers.runtime import CodeRuntime
from hotloop.sandbox.container import Container

CLOCKS: dict[str, list[float]] = {"kernel": [], "step": []}
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}


def clocked(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await function(*args, **kwargs)
        finally:
            CLOCKS[name].append(time.perf_counter() - started)

    return timed


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--new", type=int, default=10, help="new containers timed")
    parser.add_argument("--code", default="pass")
    args = parser.parse_args(argv)
    Container.python = clocked("kernel", Container.python)  # type: ignore[method-assign]
    CodeRuntime.run = clocked("step", CodeRuntime.run)  # type: ignore[method-assign]
    running = start_server(Path(tempfile.mkdtemp()), models=["hotloop-sim"])
    try:
        client = running.client()
        meta = {"sim_code": args.code}
        first = client.responses.create(model="hotloop-sim", input="run", tools=[TOOL], metadata=meta)
        assert first.output[0].type == "code_interpreter_call" and first.output[0].status == "completed", first.output
        previous, response_s, plain_s = first.id, [], []
        for key in CLOCKS:
            CLOCKS[key].clear()
        for _ in range(args.runs):
            started = time.perf_counter()
            previous = client.responses.create(
                model="hotloop-sim", input="run", tools=[TOOL], metadata=meta, previous_response_id=previous
            ).id
            response_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.responses.create(model="hotloop-sim", input="answer")
            plain_s.append(time.perf_counter() - started)
        warm = {key: list(values) for key, values in CLOCKS.items()}
        new_s = []
        for _ in range(args.new):
            CLOCKS["step"].clear()
            client.responses.create(model="hotloop-sim", input="run", tools=[TOOL], metadata=meta)
            new_s += CLOCKS["step"]
    finally:
        running.stop()
    own = [step - kernel for step, kernel in zip(warm["step"], warm["kernel"], strict=True)]
    print(f"warm container, {args.runs} runs of {args.code!r}: medians")
    print(
        f"  kernel call {median_ms(warm['kernel']):.2f} ms, step {median_ms(warm['step']):.2f} ms "
        f"(target <= 15 ms), hotloop's own around the kernel {median_ms(own):.2f} ms"
    )
    print(
        f"  response with the run {median_ms(response_s):.1f} ms, a response with no tool {median_ms(plain_s):.1f} ms"
    )
    print(f"new container ({args.new}): first run {median_ms(new_s):.1f} ms p50 (target <= 300 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
