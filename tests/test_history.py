"""The console's time series (observability/history.py): points from two readings of the server's metrics."""

from __future__ import annotations

import pytest

from hotloop.observability.history import History, quantile
from hotloop.observability.metrics import Samples

pytestmark = pytest.mark.fast

INF = float("inf")


def reading(turns: float, failed: float, buckets: dict[float, float], connections: float) -> Samples:
    """The samples History reads: responses by status, the overhead histogram's buckets, open connections."""
    return {
        "hotloop_responses_total": {
            (("model", "m"), ("status", "completed"), ("transport", "http")): turns - failed,
            (("model", "m"), ("status", "failed"), ("transport", "http")): failed,
        },
        "hotloop_turn_overhead_seconds_bucket": {(("le", str(bound)),): count for bound, count in buckets.items()},
        "hotloop_active_connections": {(("transport", "websocket"),): connections},
    }


def test_a_point_is_what_changed_between_two_readings() -> None:
    history = History(step_s=10)
    history.sample(reading(100, 2, {0.001: 50, 0.01: 100, INF: 100}, 3), now=1000.0)
    assert not history.points  # one reading: nothing to compare with yet
    # in the next 10 s, 40 turns: 20 under 1 ms, 20 more under 10 ms; one failed
    history.sample(reading(140, 3, {0.001: 70, 0.01: 140, INF: 140}, 5), now=1010.0)
    (point,) = history.points
    assert point.turns_per_s == pytest.approx(4.0)
    assert point.errors == 1 and point.connections == 5
    assert point.overhead_p50_ms == pytest.approx(1.0)  # the 20th of 40: the top of the first bucket
    assert point.overhead_p99_ms == pytest.approx(1 + 9 * (39.6 - 20) / 20)
    history.sample(reading(140, 3, {0.001: 70, 0.01: 140, INF: 140}, 0), now=1020.0)
    idle = history.points[-1]
    assert idle.turns_per_s == 0 and idle.overhead_p50_ms is None and idle.errors == 0 and idle.connections == 0


def test_an_hour_of_points_is_kept() -> None:
    history = History(step_s=60)
    for minute in range(200):
        history.sample(reading(minute, 0, {INF: minute}, 0), now=60.0 * minute)
    assert len(history.points) == 60 and history.points[-1].time == 60.0 * 199


def test_quantiles_interpolate_within_a_bucket() -> None:
    assert quantile([], 0.5) is None and quantile([(INF, 0)], 0.5) is None
    assert quantile([(1.0, 10), (2.0, 20), (INF, 20)], 0.75) == pytest.approx(1.5)
    assert quantile([(1.0, 0), (INF, 4)], 0.5) == 1.0  # in +Inf: the last finite bound
