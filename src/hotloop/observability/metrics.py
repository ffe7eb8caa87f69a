"""Prometheus metrics of one server (GET /metrics): stage timings, caches, connections, responses, ledger backlog.

Counters that live in their own objects (cache hits and sizes, the ledger backlog) are read at scrape time by a
collector, so the hot path only bumps plain integers.

Under a supervisor (`workers > 1`, transports/workers.py) `PROMETHEUS_MULTIPROC_DIR` names a directory the
workers share: every scrape then merges all workers' values (prometheus_client's multiprocess mode), live
gauges summed over the live workers, and the scrape-time readings reach it through mirror.py.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from hotloop.observability.mirror import Mirror
from hotloop.observability.shared_samples import Samples, shared_samples
from hotloop.observability.timings import StageTimings
from hotloop.safety import SafetyResult

# Per-stage latency buckets: from tens of microseconds (a warm continuation's render) to seconds (generation).
BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
CacheReading = Callable[[], dict[str, tuple[int, int]]]  # cache name -> (hits, misses)
GaugeReading = Callable[[], dict[str, float]]


class CacheSize(NamedTuple):
    """What a bounded cache holds now and has dropped for space since start."""

    bytes: int
    max_bytes: int
    entries: int
    evictions: int


SizeReading = Callable[[], dict[str, CacheSize]]


class ReplicaReading(NamedTuple):
    """One upstream replica (backends/upstream/routing.py): health, load and routing decisions so far."""

    model: str
    replica: str
    up: bool
    in_flight: int
    routes: dict[str, int]  # decision (sticky, fallback, new) -> count


ReplicaReadings = Callable[[], list[ReplicaReading]]


class KVReading(NamedTuple):
    """An in-process model's KV state reuse (backends/local/kv_state.py), counted per prompt since start."""

    model: str
    live: int  # prompts that reused a prefix left in the context by the previous request
    snapshot: int  # prompts that restored a snapshot of an earlier chain
    cold: int  # prompts evaluated from their first token
    reused_tokens: int  # prompt tokens not evaluated (usage `cached_tokens`)
    prefilled_tokens: int  # prompt tokens evaluated
    snapshots: CacheSize


KVReadings = Callable[[], list[KVReading]]


class _KVState(Collector):
    def __init__(self, reading: KVReadings) -> None:
        self._reading = reading

    def collect(self) -> Iterator[Metric]:
        prompts = CounterMetricFamily(
            "hotloop_kv_prompts", "Prompts by where their reused KV prefix came from.", labels=["model", "source"]
        )
        tokens = CounterMetricFamily(
            "hotloop_kv_prompt_tokens", "Prompt tokens reused from KV state or prefilled.", labels=["model", "kind"]
        )
        held = GaugeMetricFamily("hotloop_kv_snapshot_bytes", "Bytes of KV state snapshots held.", labels=["model"])
        bound = GaugeMetricFamily("hotloop_kv_snapshot_max_bytes", "Byte bound of the snapshots.", labels=["model"])
        count = GaugeMetricFamily("hotloop_kv_snapshots", "KV state snapshots held.", labels=["model"])
        evictions = CounterMetricFamily(
            "hotloop_kv_snapshot_evictions", "Snapshots dropped to stay within the bound (LRU).", labels=["model"]
        )
        for kv in self._reading():
            for source, n in (("live", kv.live), ("snapshot", kv.snapshot), ("none", kv.cold)):
                prompts.add_metric([kv.model, source], n)
            tokens.add_metric([kv.model, "reused"], kv.reused_tokens)
            tokens.add_metric([kv.model, "prefilled"], kv.prefilled_tokens)
            held.add_metric([kv.model], kv.snapshots.bytes)
            bound.add_metric([kv.model], kv.snapshots.max_bytes)
            count.add_metric([kv.model], kv.snapshots.entries)
            evictions.add_metric([kv.model], kv.snapshots.evictions)
        yield from (prompts, tokens, held, bound, count, evictions)


class _Replicas(Collector):
    def __init__(self, reading: ReplicaReadings) -> None:
        self._reading = reading

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "replica"]
        routes = CounterMetricFamily(
            "hotloop_upstream_routes", "Upstream routing decisions by replica.", labels=[*labels, "decision"]
        )
        up = GaugeMetricFamily("hotloop_upstream_replica_up", "1: the replica is healthy; 0: down.", labels=labels)
        busy = GaugeMetricFamily("hotloop_upstream_replica_in_flight", "Requests in flight per replica.", labels=labels)
        for reading in self._reading():
            for decision, count in reading.routes.items():
                routes.add_metric([reading.model, reading.replica, decision], count)
            up.add_metric([reading.model, reading.replica], 1 if reading.up else 0)
            busy.add_metric([reading.model, reading.replica], reading.in_flight)
        yield from (routes, up, busy)


class _Readings(Collector):
    def __init__(self, caches: CacheReading, gauges: GaugeReading, sizes: SizeReading | None) -> None:
        self._caches = caches
        self._gauges = gauges
        self._sizes = sizes

    def collect(self) -> Iterator[Metric]:
        lookups = CounterMetricFamily(
            "hotloop_cache_lookups", "Cache lookups by cache and result.", labels=["cache", "result"]
        )
        for cache, (hits, misses) in self._caches().items():
            lookups.add_metric([cache, "hit"], hits)
            lookups.add_metric([cache, "miss"], misses)
        yield lookups
        if self._sizes is not None:
            yield from _size_families(self._sizes())
        for name, value in self._gauges().items():
            yield GaugeMetricFamily(f"hotloop_{name}", name.replace("_", " ").capitalize() + ".", value=value)


def _size_families(sizes: dict[str, CacheSize]) -> Iterator[Metric]:
    held = GaugeMetricFamily("hotloop_cache_bytes", "Estimated bytes held by each bounded cache.", labels=["cache"])
    bound = GaugeMetricFamily("hotloop_cache_max_bytes", "Byte bound of each cache.", labels=["cache"])
    entries = GaugeMetricFamily("hotloop_cache_entries", "Entries held by each bounded cache.", labels=["cache"])
    evictions = CounterMetricFamily(
        "hotloop_cache_evictions", "Entries each cache dropped to stay within its bound (LRU).", labels=["cache"]
    )
    for cache, size in sizes.items():
        held.add_metric([cache], size.bytes)
        bound.add_metric([cache], size.max_bytes)
        entries.add_metric([cache], size.entries)
        evictions.add_metric([cache], size.evictions)
    yield from (held, bound, entries, evictions)


SHARED_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name: it reads it when first imported


class _Merged:
    """What `generate_latest` reads: the families `collect` gives."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self.collect = families


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.shared_dir = os.environ.get(SHARED_DIR_ENV) or None  # every worker's values, when set
        self.mirror = Mirror() if self.shared_dir else None
        self.finished = 0  # responses counted so far: whether anything moved since the last sync
        self._finishing: asyncio.Event | None = None  # set by the next response counted (`finishing`)
        self._stage_children: dict[str, Any] = {}
        self._response_children: dict[tuple[str, str, str], Any] = {}
        self.stage_seconds = Histogram(
            "hotloop_stage_seconds", "Server time per turn stage.", ["stage"], buckets=BUCKETS, registry=self.registry
        )
        self.overhead_seconds = Histogram(
            "hotloop_turn_overhead_seconds",
            "The API's own time per finished turn: pre_inference + post_inference.",
            buckets=BUCKETS,
            registry=self.registry,
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
            multiprocess_mode="livesum",
        )
        self.in_flight = Gauge(
            "hotloop_responses_in_flight",
            "Responses generating now, by transport.",
            ["transport"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.generations_cancelled = Counter(
            "hotloop_generations_cancelled",
            "Backend generations stopped early: the client went away or the response was cancelled.",
            ["transport"],
            registry=self.registry,
        )
        self.backend_failures = Counter(
            "hotloop_backend_failures",
            "Responses failed by the backend: `timeout` (no delta within backend_timeout_s) or `error` (it raised).",
            ["reason"],
            registry=self.registry,
        )
        self.mcp_calls = Counter(
            "hotloop_mcp_calls",
            "MCP tool calls the server ran, by outcome: completed, or the error's type (mcp_protocol_error, "
            "mcp_tool_execution_error, http_error).",
            ["outcome"],
            registry=self.registry,
        )
        self.mcp_call_seconds = Histogram(
            "hotloop_mcp_call_seconds",
            "Time of the MCP tool calls the server ran.",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.tools_dropped = Counter(
            "hotloop_tools_dropped",
            "Tools a request sent that the server left out (setting drop_tool_types), by type.",
            ["type"],
            registry=self.registry,
        )
        self.subagents = Counter(
            "hotloop_subagents",
            "Subagents of multi-agent responses, by how each run ended: completed, failed or interrupted.",
            ["outcome"],
            registry=self.registry,
        )
        self.mcp_lists = Counter(
            "hotloop_mcp_lists",
            "MCP servers' tool lists a turn needed: `listed` (tools/list), `reused` (from the context or the chain) "
            "or `failed` (the create failed with 424).",
            ["outcome"],
            registry=self.registry,
        )
        self.file_search_seconds = Histogram(
            "hotloop_file_search_seconds",
            "Searches of vector stores (POST /v1/vector_stores/{id}/search and file_search calls), end to end.",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.files_ingested = Counter(
            "hotloop_files_ingested",
            "Vector store files this server ingested, by outcome: completed, failed, or lost (cancelled, removed or "
            "taken over meanwhile).",
            ["outcome"],
            registry=self.registry,
        )
        self.bytes_ingested = Counter(
            "hotloop_file_bytes_ingested", "Bytes of the files ingested into vector stores.", registry=self.registry
        )
        self.files_ingesting = Gauge(
            "hotloop_files_ingesting",
            "Vector store files being ingested now.",
            registry=self.registry,
            multiprocess_mode="livesum",
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

    def watch(self, caches: CacheReading, gauges: GaugeReading, sizes: SizeReading | None = None) -> None:
        """Register the scrape-time readings (caches' hits and misses, backlog and sizes, bounded caches)."""
        self._watch(_Readings(caches, gauges, sizes))

    def watch_replicas(self, reading: ReplicaReadings) -> None:
        """Register the upstream replicas' routing counts and health (read at scrape time)."""
        self._watch(_Replicas(reading))

    def watch_kv(self, reading: KVReadings) -> None:
        """Register the in-process models' KV state reuse (read at scrape time)."""
        self._watch(_KVState(reading))

    def _watch(self, collector: Collector) -> None:
        if self.mirror is not None:
            self.mirror.readers.append(collector)
        else:
            self.registry.register(collector)

    def observe(self, timings: StageTimings) -> None:
        children = self._stage_children
        for stage, seconds in timings.seconds.items():
            child = children.get(stage)
            if child is None:  # `labels()` takes a lock and builds a key each call: once per stage is enough
                child = children[stage] = self.stage_seconds.labels(stage)
            child.observe(seconds)
        overhead = timings.seconds.get("pre_inference", 0.0) + timings.seconds.get("post_inference", 0.0)
        self.overhead_seconds.observe(overhead)

    def count_response(self, model: str, status: str, transport: str) -> None:
        key = (model, status, transport)
        child = self._response_children.get(key)
        if child is None:
            child = self._response_children[key] = self.responses.labels(*key)
        child.inc()
        self.finished += 1
        if self._finishing is not None:
            self._finishing.set()
            self._finishing = None

    def finishing(self) -> asyncio.Event:
        """An event the next response counted sets (the idle worker's metrics sync waits on it)."""
        if self._finishing is None:
            self._finishing = asyncio.Event()
        return self._finishing

    def collect(self) -> Iterable[Metric]:
        """Every family: this process's, or with a shared directory every worker's (this one's readings synced
        first)."""
        if self.shared_dir is None:
            return self.registry.collect()
        self.sync()
        return MultiProcessCollector(None, self.shared_dir).collect()

    def samples(self, families: Collection[str] | None = None) -> Samples:
        """Every sample `collect` gives: name -> {sorted (label, value) pairs -> value}. With `families` (their
        names, as declared: `hotloop_responses`), only theirs, and with a shared directory read without a full merge
        or a sync (shared_samples.py): they must be the pipeline's own counters, histograms or summed gauges."""
        if families is not None and self.shared_dir is not None:
            return shared_samples(self.shared_dir, families)
        found: Samples = defaultdict(dict)
        for family in self.collect():
            if families is not None and family.name not in families:
                continue
            for sample in family.samples:
                found[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
        return found

    def sync(self) -> None:
        """Copy this worker's scrape-time readings into the shared files (a no-op for a single process)."""
        if self.mirror is not None:
            self.mirror.sync()

    def exposition(self) -> bytes:
        return generate_latest(_Merged(self.collect))
