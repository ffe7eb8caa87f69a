"""What a limit check costs a request: this process's buckets against the table the workers share, side by side in
one run (docs/benchmarks.md, "Limits across workers"). `python scripts/bench_limits.py [--keys 1000] [--rounds 7]`.

Each round times `admit()` (rpm and tpm on), `charge()` and a connection's `acquire()` + `release()` over many keys,
for both kinds; the figures are the medians over the rounds, in microseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hotloop.pipeline.state.limits import ConnectionSlots, RateLimiter
from hotloop.pipeline.state.shared_limits import LimitTable, SharedConnectionSlots, SharedRateLimiter

RPM, TPM = 10**9, 10**12  # never refused: the cost of the check, not of building a 429


def per_call(action: Callable[[str], None], keys: list[str], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        for key in keys:
            action(key)
    return (time.perf_counter() - started) / (repeat * len(keys)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    keys = [f"owner-{n:05d}" for n in range(args.keys)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "limits"
        LimitTable.create(path, workers=2)
        kinds = {
            "process": (RateLimiter(RPM, TPM), ConnectionSlots(0, 0)),
            "shared": (
                SharedRateLimiter(LimitTable(path, 0, RPM, TPM), RPM, TPM),
                SharedConnectionSlots(LimitTable(path, 0), 0, 0),
            ),
        }
        figures: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
        for _ in range(args.rounds):
            for kind, (limiter, slots) in kinds.items():
                runs = figures[kind]

                def connection(key: str, slots: ConnectionSlots = slots) -> None:
                    slots.acquire(key)
                    slots.release(key)

                def charge(key: str, limiter: RateLimiter = limiter) -> None:
                    limiter.charge(key, 100)

                runs.setdefault("admit", []).append(per_call(limiter.admit, keys, args.repeat))
                runs.setdefault("charge", []).append(per_call(charge, keys, args.repeat))
                runs.setdefault("acquire + release", []).append(per_call(connection, keys, args.repeat))
    print(f"{args.keys} keys, {args.rounds} rounds of {args.repeat} passes; medians in µs per call")
    print("| call | this process's | shared by the workers | added |")
    print("|---|---|---|---|")
    for call in figures["process"]:
        local = statistics.median(figures["process"][call])
        shared = statistics.median(figures["shared"][call])
        print(f"| {call} | {local:.2f} | {shared:.2f} | {shared - local:+.2f} |")


if __name__ == "__main__":
    main()
