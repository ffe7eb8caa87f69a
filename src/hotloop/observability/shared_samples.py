"""A few families from the workers' shared metrics files, without merging all of them.

A scrape merges every family of every worker's file (prometheus_client's MultiProcessCollector), a few
milliseconds of CPU; the console's history needs three families every ten seconds, on every worker, idle or not.
This reads the same files but decodes only the entries of the families asked for (an entry's key starts with its
family's name) and adds them up as the merge would: counters and `sum`/`livesum` gauges summed over the workers,
histogram buckets summed per bound and then made cumulative. Other gauge modes are not read here.
"""

from __future__ import annotations

import glob
import json
import os
from collections import defaultdict
from collections.abc import Collection

from prometheus_client.mmap_dict import MmapedDict

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]
SUMMED = ("counter_", "histogram_", "gauge_sum_", "gauge_livesum_")  # the files whose values add up


def shared_samples(directory: str, families: Collection[str]) -> Samples:
    """name -> {sorted (label, value) pairs -> value} of the samples of `families`, over every worker's file."""
    prefixes = tuple(json.dumps([family])[:-1] + "," for family in families)  # '["name",' starts each key
    summed: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[str, dict[Labels, dict[float, tuple[str, float]]]] = defaultdict(dict)
    for path in glob.glob(os.path.join(directory, "*.db")):
        if not os.path.basename(path).startswith(SUMMED):
            continue
        try:
            values = MmapedDict.read_all_values_from_file(path)
        except FileNotFoundError:  # a live gauge's file, removed as its worker died
            continue
        for key, value, _, _ in values:
            if not key.startswith(prefixes):
                continue
            _, name, labels, _ = json.loads(key)
            if name.endswith("_bucket"):
                bound = labels.pop("le")
                by_bound = buckets[name].setdefault(tuple(sorted(labels.items())), {})
                before = by_bound.get(float(bound), (bound, 0.0))[1]
                by_bound[float(bound)] = (bound, before + value)
            else:
                summed[name][tuple(sorted(labels.items()))] += value
    found: Samples = {name: dict(series) for name, series in summed.items()}
    for name, by_labels in buckets.items():
        series = found.setdefault(name, {})
        for labels, by_bound in by_labels.items():
            total = 0.0
            for _, (bound, count) in sorted(by_bound.items()):  # the files count each bucket alone
                total += count
                series[tuple(sorted((*labels, ("le", bound))))] = total
    return found
