"""The duration histograms' slots (``metrics.bucket_of``): exactly ``bisect_left`` over the bounds,
so every observation is counted under the ``le`` bucket Prometheus expects."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest

from dataplane.router.metrics import BUCKETS_S, RouteStats, Timing, bucket_of

# Every bound, just below and just above it, zero, negatives, the extremes and NaN.
_VALUES = [
    *BUCKETS_S,
    *(math.nextafter(b, -math.inf) for b in BUCKETS_S),
    *(math.nextafter(b, math.inf) for b in BUCKETS_S),
    0.0,
    -0.0,
    -1.0,
    1e-9,
    0.0004,
    0.0031,
    7.0,
    299.0,
    1e9,
    math.inf,
    -math.inf,
    math.nan,
]


@pytest.mark.parametrize("duration_s", _VALUES)
def test_slot_is_bisect_left(duration_s: float) -> None:
    assert bucket_of(duration_s) == bisect_left(BUCKETS_S, duration_s)


def test_observations_land_under_their_le_bucket() -> None:
    """A duration equal to a bound counts under that bound (``le``), one above it under the next,
    one past the largest under +Inf only."""
    stats, timing = RouteStats("/v1/chat/completions"), Timing()
    for value in (0.001, 0.0011, 1000.0):
        stats.observe(200, value)
        timing.observe(value)
    for buckets in (stats.buckets, timing.buckets):
        assert buckets[0] == 1  # le 0.001
        assert buckets[1] == 1  # le 0.0025
        assert buckets[-1] == 1  # +Inf only
        assert sum(buckets) == 3
    assert stats.count == timing.count == 3
    assert stats.by_status == {200: 3}
