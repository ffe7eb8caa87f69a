"""Per-turn stage timings: where a turn's server time goes, stage by stage (no I/O)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hotloop.observability.tracing import ResponseTrace

# The stages every turn has, in pipeline order (docs/metrics.md); `compact` (a turn that compacts its context)
# and `engine` (an engine that reports its own time) only some.
STAGES = ("validate", "resolve", "safety", "render", "pre_inference", "ttft", "generate", "post_inference")


class StageTimings:
    """Seconds spent per stage of one turn; `pre_inference` runs from the request's last byte to the backend
    call, `post_inference` from the last token to the terminal event."""

    __slots__ = ("_marks", "seconds", "started_at", "trace")

    def __init__(self, started_at: float | None = None, trace: ResponseTrace | None = None) -> None:
        self.started_at = time.perf_counter() if started_at is None else started_at
        self.seconds: dict[str, float] = {}
        self._marks: dict[str, float] = {}
        self.trace = trace  # the response's trace, when tracing is on: each stage is also an interval of it

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            self.add(name, end - start)
            if self.trace is not None:
                self.trace.intervals.append((name, start, end))

    def interval(self, name: str) -> None:
        """A span of the trace alone (`finish`), from the mark `name` to now: no stage of its own."""
        if self.trace is not None:
            self.trace.intervals.append((name, self._marks.get(name, self.started_at), time.perf_counter()))

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def mark(self, name: str) -> None:
        """Remember a moment (e.g. `inference_start`) to measure spans across awaits."""
        self._marks[name] = time.perf_counter()

    def since(self, name: str) -> float:
        return time.perf_counter() - self._marks.get(name, self.started_at)

    def milliseconds(self) -> dict[str, float]:
        return {name: round(value * 1000, 3) for name, value in self.seconds.items()}
