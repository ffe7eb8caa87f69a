"""Scraping GET /metrics in tests: the Prometheus text parsed by prometheus_client, samples by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conftest import RunningServer

LabelSet = frozenset[tuple[str, str]]


class Scrape:
    """One scrape: the families (name → type) and every sample's value by (sample name, labels)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: dict[tuple[str, LabelSet], float] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        """A sample's value; 0 when the series does not exist yet (a counter never incremented)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of `name` whose labels include `labels` (e.g. all models and statuses)."""
        wanted = set(labels.items())
        return sum(value for (found, tags), value in self.samples.items() if found == name and wanted <= tags)

    def has(self, name: str, **labels: str) -> bool:
        return (name, frozenset(labels.items())) in self.samples

    def label_values(self) -> set[str]:
        return {value for _, labels in self.samples for _, value in labels}


def metrics_url(server: RunningServer) -> str:
    return server.base_url.removesuffix("/v1") + "/metrics"


def scrape(server: RunningServer, headers: dict[str, str] | None = None) -> Scrape:
    reply = httpx.get(metrics_url(server), headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain"), reply.headers
    return Scrape(reply.text)


def wait_for(server: RunningServer, check: Callable[[Scrape], bool], timeout: float = 5.0) -> Scrape:
    """Scrape until `check` holds (a gauge that moves just after a client-side event)."""
    deadline = time.monotonic() + timeout
    while True:
        current = scrape(server)
        if check(current):
            return current
        assert time.monotonic() < deadline, current.text
        time.sleep(0.01)
