"""What a file_search step inside a response costs beyond the search itself (issue 39's target: ≤ 5 ms).

A manual benchmark, never run in CI. One hotloop server (hotloop-sim, SQLite, in this process on a thread) holds a
vector store of Python's reference topics (`pydoc_data.topics`, 79 files, `auto` chunking). Each run is a streamed
response whose model searches the store once and answers citing the first result.

The step's own work is timed where it runs (its functions wrapped with a clock in this process):
- `search`: `FileSearch.search`, the search itself (query embedding, both rankings, the texts read);
- `safety`: the safety stage's scan of the results (a third party's text) before the model reads them;
- `events`: the call item's end and its events (`file_search_finished`);
- `extend`: the next generation's request, the prompt extended with the call and its results (`next_generation`:
  rendering and tokenizing ~8k tokens of results at the default 10).
`own` = safety + events + extend: what the step adds beyond the search. The server's stage timings (the opt-in
`hotloop:timing_metrics` event) are shown too: their `file_search` is the step's wall time, which also holds the
time the stream's consumer takes with each event the step yields (writing them to the socket).

    .venv/bin/python scripts/bench_file_search_step.py --runs 50 [--results 10]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import start_server  # the tests' in-process server

QUESTIONS = [
    "How do I leave a loop before it has finished?",
    "Which methods does an object need to work in a with block?",
    "How are names with two leading underscores changed inside a class body?",
    "What value does a function return when it has no return statement?",
]


CLOCKS: dict[str, list[float]] = collections.defaultdict(list)


def clocked(name: str, function: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    if is_async:

        @functools.wraps(function)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                CLOCKS[name].append((time.perf_counter() - started) * 1e3)

        return timed_async

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            CLOCKS[name].append((time.perf_counter() - started) * 1e3)

    return timed


def install_clocks() -> None:
    from hotloop.pipeline.filesearch.runtime import FileSearch
    from hotloop.pipeline.steps.file_searches import FileSearches
    from hotloop.pipeline.steps.loop import Steps
    from hotloop.wire.builder import ResponseBuilder

    FileSearch.search = clocked("search", FileSearch.search, True)  # type: ignore[method-assign]
    Steps.next_generation = clocked("extend", Steps.next_generation, True)  # type: ignore[method-assign]
    finished = ResponseBuilder.file_search_finished
    ResponseBuilder.file_search_finished = clocked("events", finished, False)  # type: ignore[method-assign]
    scan = FileSearches._scan if hasattr(FileSearches, "_scan") else None
    if scan is not None:
        FileSearches._scan = clocked("safety", scan, True)  # type: ignore[method-assign]
    else:
        from hotloop.safety import SafetyStage

        SafetyStage.scan_async = clocked("safety", SafetyStage.scan_async, True)  # type: ignore[method-assign]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def run(runs: int, results: int) -> dict[str, Any]:
    install_clocks()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), models=["hotloop-sim"])
        try:
            client = server.client()
            store = client.vector_stores.create(name="topics")
            files = [(f"{key}.txt", text.encode()) for key, text in sorted(topics.items())]
            batch = client.vector_stores.file_batches.upload_and_poll(
                vector_store_id=store.id, files=files, poll_interval_ms=100
            )
            assert batch.file_counts.completed == len(files), batch.file_counts
            tool = {"type": "file_search", "vector_store_ids": [store.id], "max_num_results": results}
            rows: list[dict[str, float]] = []
            headers = {"authorization": "Bearer test-key", "x-responsesapi-include-timing-metrics": "true"}
            searches = server.service.file_search.searches
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http:
                for n in range(runs + 5):
                    body = {"model": "hotloop-sim", "input": QUESTIONS[n % len(QUESTIONS)], "tools": [tool]}
                    reply = http.post("/responses", json={**body, "stream": True})
                    timings = _timings(reply.text)
                    search_s = searches[-1].seconds
                    if n < 5:
                        CLOCKS.clear()
                        continue  # warm-up: the index is loaded and the model's first searches are done
                    rows.append(
                        {
                            "step_ms": timings["file_search"],
                            "extend_ms": timings.get("mcp_step", 0.0),
                            "search_ms": search_s * 1e3,
                            "beyond_ms": timings["file_search"] + timings.get("mcp_step", 0.0) - search_s * 1e3,
                        }
                    )
        finally:
            server.stop()
    own = [sum(values) for values in zip(CLOCKS["safety"], CLOCKS["events"], CLOCKS["extend"], strict=False)]
    figures = {**{name: [row[name] for row in rows] for name in rows[0]}, **CLOCKS, "own": own}
    return {
        ("stage_" if name in rows[0] else "") + name: {
            "p50": round(statistics.median(values), 3),
            "p90": round(percentile(values, 0.9), 3),
        }
        for name, values in figures.items()
    }


def _timings(sse: str) -> dict[str, float]:
    for line in sse.splitlines():
        if line.startswith("data: ") and "hotloop:timing_metrics" in line:
            found: dict[str, float] = json.loads(line[6:])["timings"]
            return found
    raise AssertionError("no timing_metrics event")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--results", type=int, default=10, help="max_num_results of the tool")
    args = parser.parse_args()
    started = time.perf_counter()
    print(json.dumps({"runs": args.runs, "max_num_results": args.results, **run(args.runs, args.results)}, indent=1))
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
