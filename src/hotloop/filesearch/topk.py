"""The best k of a ranking's scores, exactly, without partitioning all of them.

A search ranks every chunk of a store (pipeline/filesearch/index.py): at ~100k chunks `np.argpartition` of the
whole score array took ~0.9 ms a ranking here, as long as a sixth of the vector scan itself. A strided sample's k-th
best score is reached by at least k scores of the whole (the sample's own best k), so it is a floor below which no
row of the best k lies: one comparison pass keeps the few hundred rows at or above it, and only those are
partitioned (~0.08 ms, the same rows)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

STRIDE = 16  # one score in 16 makes the sample


def top(scores: npt.NDArray[np.float32], k: int, above: float = -np.inf) -> npt.NDArray[np.int64]:
    """The rows of the (at most) `k` best scores, in no order, each above `above` (a finite `above`, e.g. a lexical
    ranking's 0, is applied first: the many rows tied at it would otherwise all pass the floor)."""
    rows = np.flatnonzero(scores > above) if np.isfinite(above) else np.arange(len(scores))
    values = scores[rows] if np.isfinite(above) else scores
    if len(values) > k > 0:
        sample = values[::STRIDE]
        if len(sample) > k:
            kept = np.flatnonzero(values >= np.partition(sample, len(sample) - k)[len(sample) - k])
            rows, values = rows[kept], values[kept]
        best = np.argpartition(values, len(values) - k)[len(values) - k :]
        rows, values = rows[best], values[best]
    return rows[values > above] if k > 0 else rows[:0]
