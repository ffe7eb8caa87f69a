"""`hotloop bench agent-loop` (or `bench load`) at two commits, side by side: each commit checked out into a
temporary worktree, the runs alternating between them (A B, B A, …) so that a drift of the machine's speed falls on
both, one run of the bench each time; the medians per commit and the ratio of each pair's main figure (agent-loop:
overhead per turn; load: the server's CPU per turn).

    .venv/bin/python scripts/bench_revisions.py BASE [HEAD] --pairs 8 -- --turns 50 --context-tokens 100000 --tool-ms 50
    .venv/bin/python scripts/bench_revisions.py BASE [HEAD] --scenario load --pairs 4 -- --connections 100 --turns 20

Both commits run with this checkout's virtualenv (their `src/` first on PYTHONPATH): for commits whose dependencies
match it. What follows `--` goes to the bench (default: agent-loop's 50-turn, 100k-token ws loop of
docs/benchmarks.md; load's 100 sessions of 20 turns).
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
DEFAULTS = {
    "agent-loop": ["--turns", "50", "--context-tokens", "100000", "--tps", "1000", "--tool-ms", "50", "--modes", "ws"],
    "load": ["--connections", "100", "--turns", "20"],
}
Runs = dict[str, list[dict[str, Any]]]  # per commit (head, base), one flat dict of figures a run
FIGURES = {  # the first is the one compared pair by pair
    "agent-loop": ("overhead_ms", "e2e_over_physical", "excess_per_step_ms", "ttft_ms"),
    "load": ("server_cpu_ms_per_turn", "overhead_p50_ms", "overhead_p99_ms", "server_p50_ms", "turns_per_s"),
}


def run_once(tree: Path, scenario: str, bench_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        command = [sys.executable, "-m", "hotloop", "bench", scenario, *bench_args, "--json", str(out)]
        if scenario == "agent-loop":
            command += ["--runs", "1", "--quiet"]
        env = dict(os.environ, PYTHONPATH=str(tree / "src"))
        subprocess.run(command, env=env, cwd=tree, check=True, capture_output=True)
        result = json.loads(out.read_text())
    if scenario == "load":
        run = result["runs"][0]
        return {
            "server_cpu_ms_per_turn": run["server_cpu_ms_per_turn"],
            "overhead_p50_ms": run["overhead_ms"]["p50"],
            "overhead_p99_ms": run["overhead_ms"]["p99"],
            "server_p50_ms": run["server_ms"]["p50"],
            "turns_per_s": run["turns_per_s"],
        }
    modes = result["modes"]
    return dict(modes["ws"]["median"] if "ws" in modes else next(iter(modes.values()))["median"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the commit to compare against (B)")
    parser.add_argument("head", nargs="?", default="HEAD", help="the commit measured (A; default HEAD)")
    parser.add_argument("--scenario", choices=tuple(DEFAULTS), default="agent-loop")
    parser.add_argument("--pairs", type=int, default=8)
    argv = sys.argv[1:]
    # What follows `--` is the bench's, split off here: argparse cannot place `--` after an optional positional.
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    bench_args = argv[cut + 1 :] or DEFAULTS[args.scenario]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {name: Path(tmp) / name for name in ("head", "base")}
        for name, tree in trees.items():
            rev = getattr(args, name)
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], cwd=ROOT, check=True)
        try:
            runs = compare(trees, args.scenario, bench_args, args.pairs)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    report(runs, FIGURES[args.scenario], args.head, args.base)


def compare(trees: dict[str, Path], scenario: str, bench_args: list[str], pairs: int) -> Runs:
    runs: Runs = {"head": [], "base": []}
    main_figure = FIGURES[scenario][0]
    for pair in range(pairs):
        for name in ("head", "base") if pair % 2 == 0 else ("base", "head"):
            runs[name].append(run_once(trees[name], scenario, bench_args))
            print(f"pair {pair + 1}/{pairs} {name}: {main_figure} {runs[name][-1][main_figure]:.3f}", flush=True)
    return runs


def report(runs: Runs, figures: tuple[str, ...], head: str, base: str) -> None:
    print(f"\nmedians of {len(runs['head'])} runs each ({head} against {base}):")
    print(f"{'figure':<24} {head:>12} {base:>12}")
    for figure in figures:
        a = statistics.median(run[figure] for run in runs["head"])
        b = statistics.median(run[figure] for run in runs["base"])
        print(f"{figure:<24} {a:12.4f} {b:12.4f}")
    main_figure = figures[0]
    ratios = [a[main_figure] / b[main_figure] for a, b in zip(runs["head"], runs["base"], strict=True)]
    shown = ", ".join(f"{ratio:.3f}" for ratio in ratios)
    print(f"{main_figure} {head}/{base}, pair by pair: {shown}; median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
