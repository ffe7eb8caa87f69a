"""The console's time series (docs/console.md): every `step_s` the server's metrics (every worker's, under a
supervisor) are read once and the change since the last reading becomes a point: turns per second, the API's own
time per turn at p50 and p99 (from the `hotloop_turn_overhead_seconds` buckets that filled in the step), failed
responses and open WebSocket connections. An hour of points is kept; no I/O, nothing per request.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import msgspec

from hotloop.observability.metrics import Samples

SPAN_S = 3600.0  # how far back the console looks
FAMILIES = ("hotloop_responses", "hotloop_turn_overhead_seconds", "hotloop_active_connections")  # what it reads
Buckets = list[tuple[float, float]]  # (upper bound, cumulative count), ascending; the last bound is +Inf


class Point(msgspec.Struct):
    time: float  # the step's end (time.time())
    turns_per_s: float
    overhead_p50_ms: float | None  # None: no turn finished in the step
    overhead_p99_ms: float | None
    errors: int  # responses that failed in the step
    connections: int  # open WebSocket connections at its end


class _Reading(NamedTuple):
    time: float
    turns: float
    errors: float
    overhead: Buckets


class History:
    def __init__(self, step_s: float, span_s: float = SPAN_S) -> None:
        self.step_s = step_s
        self.points: deque[Point] = deque(maxlen=max(2, int(span_s / step_s)))
        self._last: _Reading | None = None

    def sample(self, samples: Samples, now: float) -> None:
        """A reading of the metrics at `now`; from the second on, each one adds a point."""
        responses = samples.get("hotloop_responses_total", {})
        reading = _Reading(
            now,
            sum(responses.values()),
            sum(value for labels, value in responses.items() if ("status", "failed") in labels),
            _buckets(samples.get("hotloop_turn_overhead_seconds_bucket", {})),
        )
        last, self._last = self._last, reading
        if last is None or now <= last.time:
            return
        turns = max(0.0, reading.turns - last.turns)
        filled = [(bound, count - before) for (bound, count), (_, before) in _aligned(reading.overhead, last.overhead)]
        connections = sum(samples.get("hotloop_active_connections", {}).values())
        self.points.append(
            Point(
                time=now,
                turns_per_s=turns / (now - last.time),
                overhead_p50_ms=_ms(quantile(filled, 0.5)),
                overhead_p99_ms=_ms(quantile(filled, 0.99)),
                errors=int(max(0.0, reading.errors - last.errors)),
                connections=int(connections),
            )
        )


def _buckets(series: dict[tuple[tuple[str, str], ...], float]) -> Buckets:
    return sorted((float(dict(labels)["le"]), value) for labels, value in series.items())


def _aligned(now: Buckets, before: Buckets) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Each bucket of `now` with the same bucket of `before` (zero where `before` had none yet)."""
    earlier = dict(before)
    return [((bound, count), (bound, earlier.get(bound, 0.0))) for bound, count in now]


def quantile(buckets: Buckets, q: float) -> float | None:
    """The q-quantile of a cumulative histogram, interpolated within its bucket (as Prometheus'
    histogram_quantile does); None for an empty one. The +Inf bucket answers with the last finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
