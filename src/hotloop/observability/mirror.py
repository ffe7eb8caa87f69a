"""One worker's scrape-time readings (cache hits, sizes, the ledger's backlog, replicas, KV reuse), written into
prometheus_client's multiprocess files so that a scrape on any worker sees every worker's.

With `workers > 1` the supervisor gives each worker a shared directory (`PROMETHEUS_MULTIPROC_DIR`): counters,
histograms and gauges made with prometheus_client write their values to a file per process there, and a scrape
merges them all. The readings live in plain objects instead (no cost on the hot path), so `Mirror.sync()` copies
them in: a counter by what it gained since the last sync, a gauge by its value with the aggregation of
`GAUGE_MODES` (by default the sum over the live workers). A worker syncs before it answers a scrape, a second
after a response finishes, and every ten seconds while none does (pipeline/service.py), so another worker's
readings are at most a second behind its last response; the pipeline's own counters are exact.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

# A replica is up when every worker sees it up (each one checks its replicas itself); sizes, counts and bounds
# are each worker's own caches and add up.
Mode = Literal["livesum", "livemin"]
GAUGE_MODES: dict[str, Mode] = {"hotloop_upstream_replica_up": "livemin"}
Key = tuple[str, tuple[str, ...]]


class Mirror:
    def __init__(self) -> None:
        self.readers: list[Collector] = []
        self._registry = CollectorRegistry()  # never collected: the values go to the shared files
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        self._last: dict[Key, float] = {}

    def sync(self) -> None:
        for reader in self.readers:
            for family in reader.collect():
                if family.type == "counter":
                    self._counters_of(family.name, family.documentation, family.samples)
                elif family.type == "gauge":
                    self._gauges_of(family.name, family.documentation, family.samples)

    def _counters_of(self, name: str, doc: str, samples: list[Sample]) -> None:
        for sample in samples:
            if sample.name != name + "_total":
                continue
            labels = tuple(sorted(sample.labels))
            counter = self._counters.get(name)
            if counter is None:
                counter = self._counters[name] = Counter(name, doc, labels, registry=self._registry)
            values = tuple(sample.labels[label] for label in labels)
            key = (name, values)
            gained = sample.value - self._last.get(key, 0.0)
            if gained < 0:  # the reading started again from zero (a cache rebuilt): all of it is new
                gained = sample.value
            self._last[key] = sample.value
            if gained:
                (counter.labels(*values) if labels else counter).inc(gained)

    def _gauges_of(self, name: str, doc: str, samples: list[Sample]) -> None:
        for sample in samples:
            labels = tuple(sorted(sample.labels))
            gauge = self._gauges.get(name)
            if gauge is None:
                mode: Mode = GAUGE_MODES.get(name, "livesum")
                gauge = self._gauges[name] = Gauge(name, doc, labels, registry=self._registry, multiprocess_mode=mode)
            values = tuple(sample.labels[label] for label in labels)
            (gauge.labels(*values) if labels else gauge).set(sample.value)
