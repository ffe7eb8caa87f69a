"""Prometheus metrics of one server (GET /metrics): stage timings, caches, connections, responses, ledger backlog.

Counters that live in their own objects (cache hits and sizes, the ledger backlog) are read at scrape time by a
collector, so the hot path only bumps plain integers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hotloop.observability.timings import StageTimings
from hotloop.safety import SafetyResult

# Per-stage latency buckets: from tens of microseconds (a warm continuation's render) to seconds (generation).
BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CacheReading = Callable[[], dict[str, tuple[int, int]]]  # cache name -> (hits, misses)
GaugeReading = Callable[[], dict[str, float]]


class _Readings(Collector):
    def __init__(self, caches: CacheReading, gauges: GaugeReading) -> None:
        self._caches = caches
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        lookups = CounterMetricFamily(
            "hotloop_cache_lookups", "Cache lookups by cache and result.", labels=["cache", "result"]
        )
        for cache, (hits, misses) in self._caches().items():
            lookups.add_metric([cache, "hit"], hits)
            lookups.add_metric([cache, "miss"], misses)
        yield lookups
        for name, value in self._gauges().items():
            yield GaugeMetricFamily(f"hotloop_{name}", name.replace("_", " ").capitalize() + ".", value=value)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.stage_seconds = Histogram(
            "hotloop_stage_seconds", "Server time per turn stage.", ["stage"], buckets=BUCKETS, registry=self.registry
        )
        self.responses = Counter(
            "hotloop_responses",
            "Finished responses by model, status and transport.",
            ["model", "status", "transport"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "hotloop_active_connections",
            "Open WebSocket connections.",
            ["transport"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "hotloop_responses_in_flight",
            "Responses generating now, by transport.",
            ["transport"],
            registry=self.registry,
        )
        self.safety = Counter(
            "hotloop_safety_verdicts",
            "Safety verdicts by classifier and verdict.",
            ["classifier", "verdict"],
            registry=self.registry,
        )

    def count_safety(self, result: SafetyResult) -> None:
        """One count per classifier that found something, under the verdict of the response."""
        for classifier in sorted({finding.classifier for finding in result.findings}):
            self.safety.labels(classifier, result.verdict).inc()
        if not result.findings:
            self.safety.labels("all", "allow").inc()

    def watch(self, caches: CacheReading, gauges: GaugeReading) -> None:
        """Register the scrape-time readings (caches' hits and misses, backlog and sizes)."""
        self.registry.register(_Readings(caches, gauges))

    def observe(self, timings: StageTimings) -> None:
        for stage, seconds in timings.seconds.items():
            self.stage_seconds.labels(stage).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
