"""The sandbox's costs against issue 40's targets (docs/sandbox.md, "Measured"), as root:
`python scripts/bench_sandbox.py [--opens 20] [--calls 200] [--idle 20] [--seconds 10]`.

- a new container ready: `Sandbox.open` (tmpfs, cgroups, the kernel started and answering), then its close;
- a warm call: `pass` on a warm kernel, all of it overhead; and a call whose code times itself, its wall time less
  the code's own;
- a shell command: `true`, each in a fresh process tree; and the same in a container whose network policy allows a
  domain, behind the egress proxy (its shim, forward.py, starts before each command), the two taken in turn;
- idle: `--idle` warm containers left alone for `--seconds`, the CPU time of their whole trees (each container's
  cpuacct cgroup: bwrap, its init, the kernel, the launcher) and of this server process, in % of one core.
Prints p50 and p90 of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from hotloop.sandbox import Bounds, Container, Sandbox, probe

TIMED = "import time\n_t = time.perf_counter()\nsum(range(200_000))\ntime.perf_counter() - _t"


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1000:7.2f} ms   p90 {p90 * 1000:7.2f} ms   (n={len(ordered)})"


async def opens(sandbox: Sandbox, root: Path, count: int) -> tuple[list[float], list[float]]:
    ready, closed = [], []
    for index in range(count):
        started = time.perf_counter()
        container = await sandbox.open(root / f"open{index}", Bounds())
        ready.append(time.perf_counter() - started)
        started = time.perf_counter()
        await container.close()
        closed.append(time.perf_counter() - started)
    return ready, closed


async def warm_calls(container: Container, count: int) -> tuple[list[float], list[float], list[float]]:
    await container.python("pass")
    passes, overheads, shells = [], [], []
    for _ in range(count):
        started = time.perf_counter()
        await container.python("pass")
        passes.append(time.perf_counter() - started)
    for _ in range(count):
        started = time.perf_counter()
        run = await container.python(TIMED)
        overheads.append(time.perf_counter() - started - float(run.result or 0))
    for _ in range(max(10, count // 10)):
        started = time.perf_counter()
        await container.shell(["true"])
        shells.append(time.perf_counter() - started)
    return passes, overheads, shells


async def egress_shells(sandbox: Sandbox, root: Path, count: int) -> tuple[list[float], list[float]]:
    """`true` in a container without network and in one with an allowlist, in turn: the shim's cost."""
    plain = await sandbox.open(root / "plain", Bounds(), kernel=False)
    allowed = await sandbox.open(root / "allowed", Bounds(), kernel=False, allowed_domains=["pypi.org"])
    without, behind = [], []
    try:
        for _ in range(count):
            for container, samples in ((plain, without), (allowed, behind)):
                started = time.perf_counter()
                await container.shell(["true"])
                samples.append(time.perf_counter() - started)
    finally:
        await plain.close()
        await allowed.close()
    return without, behind


def tree_cpu(container: Container) -> float:
    return container.cpu_seconds() or 0.0


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


async def idle(sandbox: Sandbox, root: Path, count: int, seconds: float) -> tuple[float, float, float]:
    """% of a core the containers' trees and this process used while idle; and the CPU seconds the trees had used
    before (their start and one call: the counter is live)."""
    containers = await asyncio.gather(*(sandbox.open(root / f"idle{i}", Bounds()) for i in range(count)))
    try:
        await asyncio.gather(*(container.python("x = 1") for container in containers))
        await asyncio.sleep(2.0)  # settle
        before, server_before = [tree_cpu(container) for container in containers], own_cpu()
        await asyncio.sleep(seconds)
        after, server_after = [tree_cpu(container) for container in containers], own_cpu()
    finally:
        await asyncio.gather(*(container.close() for container in containers))
    trees = sum(after) - sum(before)
    return 100 * trees / seconds, 100 * (server_after - server_before) / seconds, sum(before)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--opens", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--idle", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    support = probe()
    if not support.available:
        raise SystemExit(f"the sandbox cannot run here: {support.reason}")
    print(f"memory bound: {support.memory}, process bound: {support.processes}, cores: {os.cpu_count()}")
    sandbox = Sandbox()
    with tempfile.TemporaryDirectory(prefix="hotloop-bench-sandbox-") as scratch:
        root = Path(scratch)
        ready, closed = await opens(sandbox, root, args.opens)
        print(f"new container ready (open):    {quantiles(ready)}")
        print(f"container close:               {quantiles(closed)}")
        container = await sandbox.open(root / "warm", Bounds())
        try:
            passes, overheads, shells = await warm_calls(container, args.calls)
        finally:
            await container.close()
        print(f"warm call `pass`:              {quantiles(passes)}")
        print(f"warm call less the code's own: {quantiles(overheads)}")
        print(f"shell command `true`:          {quantiles(shells)}")
        without, behind = await egress_shells(sandbox, root, max(10, args.calls // 10))
        print(f"`true`, no network (in turn):  {quantiles(without)}")
        print(f"`true`, behind the proxy:      {quantiles(behind)}")
        trees, server, earlier = await idle(sandbox, root, args.idle, args.seconds)
        print(f"{args.idle} containers' start and first call: {earlier:.3f} s of CPU in all")
        print(
            f"{args.idle} idle containers over {args.seconds:g} s: {trees:.3f}% of a core (their trees), "
            f"{server:.3f}% (this server process)"
        )
        await sandbox.close()


if __name__ == "__main__":
    asyncio.run(main())
