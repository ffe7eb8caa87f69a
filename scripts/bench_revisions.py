"""`hotloop bench agent-loop` at two commits, side by side: each commit checked out into a temporary worktree, the
runs alternating between them (A B, B A, …) so that a drift of the machine's speed falls on both, one run of the
bench each time; the medians per commit and the ratio of each pair's overhead per turn.

    .venv/bin/python scripts/bench_revisions.py BASE [HEAD] --pairs 8 -- --turns 50 --context-tokens 100000 --tool-ms 50

Both commits run with this checkout's virtualenv (their `src/` first on PYTHONPATH): for commits whose dependencies
match it. What follows `--` goes to `bench agent-loop` (default: the 50-turn, 100k-token ws loop of docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["--turns", "50", "--context-tokens", "100000", "--tps", "1000", "--tool-ms", "50", "--modes", "ws"]
FIGURES = ("overhead_ms", "e2e_over_physical", "excess_per_step_ms", "ttft_ms")


def run_once(tree: Path, bench_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        command = [sys.executable, "-m", "hotloop", "bench", "agent-loop", "--runs", "1", "--quiet"]
        command += [*bench_args, "--json", str(out)]
        env = dict(os.environ, PYTHONPATH=str(tree / "src"))
        subprocess.run(command, env=env, cwd=tree, check=True, capture_output=True)
        result = json.loads(out.read_text())
    modes = result["modes"]
    return dict(modes["ws"]["median"] if "ws" in modes else next(iter(modes.values()))["median"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the commit to compare against (B)")
    parser.add_argument("head", nargs="?", default="HEAD", help="the commit measured (A; default HEAD)")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("bench", nargs="*", help="bench agent-loop options, after --")
    args = parser.parse_args()
    bench_args = args.bench or DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        trees = {name: Path(tmp) / name for name in ("head", "base")}
        for name, tree in trees.items():
            rev = getattr(args, name)
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], cwd=ROOT, check=True)
        try:
            runs = compare(trees, bench_args, args.pairs)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    report(runs, args.head, args.base)


def compare(trees: dict[str, Path], bench_args: list[str], pairs: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {"head": [], "base": []}
    for pair in range(pairs):
        for name in ("head", "base") if pair % 2 == 0 else ("base", "head"):
            runs[name].append(run_once(trees[name], bench_args))
            print(f"pair {pair + 1}/{pairs} {name}: overhead {runs[name][-1]['overhead_ms']:.2f} ms", flush=True)
    return runs


def report(runs: dict[str, list[dict[str, Any]]], head: str, base: str) -> None:
    print(f"\nmedians of {len(runs['head'])} runs each ({head} against {base}):")
    print(f"{'figure':<22} {head:>12} {base:>12}")
    for figure in FIGURES:
        a = statistics.median(run[figure] for run in runs["head"])
        b = statistics.median(run[figure] for run in runs["base"])
        print(f"{figure:<22} {a:12.4f} {b:12.4f}")
    ratios = [a["overhead_ms"] / b["overhead_ms"] for a, b in zip(runs["head"], runs["base"], strict=True)]
    shown = ", ".join(f"{ratio:.3f}" for ratio in ratios)
    print(f"overhead per turn {head}/{base}, pair by pair: {shown}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
