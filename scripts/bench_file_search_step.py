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

With `--ingest-mb N`, plain responses (no tools) are then timed alone and while N MB of the standard library's
.py files are uploaded and ingested beside them: what ingestion costs the loops sharing the server.

    .venv/bin/python scripts/bench_file_search_step.py --runs 50 [--results 10] [--ingest-mb 4]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import sys
import tempfile
import threading
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


def stdlib_corpus(megabytes: float) -> list[tuple[str, bytes]]:
    """The standard library's own .py files, about `megabytes` of them (a corpus every machine here has)."""
    root = Path(json.__file__).resolve().parent.parent
    files: list[tuple[str, bytes]] = []
    size = 0
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        data = path.read_bytes()
        if not data.strip() or size >= megabytes * 1e6:
            continue
        files.append((f"{len(files)}-{path.name}", data))
        size += len(data)
    return files


def while_ingesting(server: Any, runs: int, megabytes: float) -> dict[str, Any]:
    """Plain responses (no tools) timed alone, then while a batch of `megabytes` is uploaded and ingested."""
    client = server.client()
    body = {"model": "hotloop-sim", "input": "Say something short."}

    def timed_responses(until: Callable[[], bool] | None) -> list[float]:
        out = []
        with httpx.Client(base_url=server.base_url, headers={"authorization": "Bearer test-key"}, timeout=60) as http:
            while len(out) < runs or (until is not None and not until()):
                started = time.perf_counter()
                http.post("/responses", json=body).raise_for_status()
                out.append((time.perf_counter() - started) * 1e3)
        return out

    alone = timed_responses(None)
    files = stdlib_corpus(megabytes)
    store = client.vector_stores.create(name="stdlib")
    done: list[Any] = []
    started = time.perf_counter()
    worker = threading.Thread(
        target=lambda: done.append(
            client.vector_stores.file_batches.upload_and_poll(vector_store_id=store.id, files=files)
        )
    )
    worker.start()
    during = timed_responses(lambda: bool(done))
    worker.join()
    seconds = time.perf_counter() - started
    size = sum(len(data) for _, data in files)
    return {
        "ingested_mb": round(size / 1e6, 2),
        "files": len(files),
        "upload_and_ingest_s": round(seconds, 1),
        "completed": done[0].file_counts.completed,
        "response_alone_ms": {"p50": round(statistics.median(alone), 2), "p99": round(percentile(alone, 0.99), 2)},
        "response_while_ingesting_ms": {
            "p50": round(statistics.median(during), 2),
            "p99": round(percentile(during, 0.99), 2),
            "n": len(during),
        },
    }


def run(runs: int, results: int, ingest_mb: float) -> dict[str, Any]:
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
            beside = while_ingesting(server, runs, ingest_mb) if ingest_mb else {}
        finally:
            server.stop()
    own = [sum(values) for values in zip(CLOCKS["safety"], CLOCKS["events"], CLOCKS["extend"], strict=False)]
    figures = {**{name: [row[name] for row in rows] for name in rows[0]}, **CLOCKS, "own": own}
    step = {
        ("stage_" if name in rows[0] else "") + name: {
            "p50": round(statistics.median(values), 3),
            "p90": round(percentile(values, 0.9), 3),
        }
        for name, values in figures.items()
    }
    return {**step, "while_ingesting": beside}


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
    parser.add_argument(
        "--ingest-mb", type=float, default=0, help="then time plain responses alone and while this much is ingested"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    figures = run(args.runs, args.results, args.ingest_mb)
    print(json.dumps({"runs": args.runs, "max_num_results": args.results, **figures}, indent=1))
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
