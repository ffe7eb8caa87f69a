"""Medians and percentiles over small samples (nearest-rank, no interpolation surprises)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any


def median(values: Iterable[float]) -> float:
    data = list(values)
    return float(statistics.median(data)) if data else math.nan


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100)."""
    data = sorted(values)
    if not data:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(data)))
    return float(data[rank - 1])


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def medians(measured: list[dict[str, Any]]) -> dict[str, float]:
    """Per number the first record holds, its median over the records (over those that hold a number for it)."""
    keys = [key for key, value in measured[0].items() if isinstance(value, int | float)] if measured else []
    return {key: median(float(m[key]) for m in measured if isinstance(m.get(key), int | float)) for key in keys}
