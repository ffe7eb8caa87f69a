"""observability/shared_samples.py: a few families read from the workers' shared metrics files add up to what
prometheus_client's full merge (a scrape) gives for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from hotloop.observability.history import FAMILIES
from hotloop.observability.shared_samples import shared_samples

pytestmark = pytest.mark.fast

# One worker's metrics: `n` responses (every third failed), overheads spread over the buckets, `n` connections,
# and families the history does not read.
WORKER = """
import sys
from hotloop.observability.metrics import Metrics
n = int(sys.argv[1])
metrics = Metrics()
for i in range(n):
    metrics.count_response("m", "failed" if i % 3 == 0 else "completed", "websocket" if i % 2 else "http")
    metrics.overhead_seconds.observe(0.0002 * i * i)
    metrics.stage_seconds.labels("render").observe(0.001)
metrics.connections.labels("websocket").inc(n)
metrics.in_flight.labels("http").inc(2)
"""


def full_merge(directory: Path, families: tuple[str, ...]) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in MultiProcessCollector(None, str(directory)).collect():
        if family.name in families:
            for sample in family.samples:
                if not sample.name.endswith(("_sum", "_count")):  # what the history reads
                    found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_the_history_families_read_alone_equal_the_full_merge(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (7, 40, 3):  # three workers' files
        subprocess.run([sys.executable, "-c", WORKER, str(n)], env=env, check=True, timeout=60)
    read = shared_samples(str(tmp_path), FAMILIES)
    for name in ("hotloop_turn_overhead_seconds_sum", "hotloop_turn_overhead_seconds_count"):
        read.pop(name, None)
    assert read == full_merge(tmp_path, FAMILIES)
    assert sum(read["hotloop_responses_total"].values()) == 50
    assert read["hotloop_active_connections"] == {(("transport", "websocket"),): 50.0}
    buckets = read["hotloop_turn_overhead_seconds_bucket"]
    assert buckets[(("le", "+Inf"),)] == 50 and len(buckets) > 3
    assert "hotloop_stage_seconds_bucket" not in read and "hotloop_responses_in_flight" not in read
