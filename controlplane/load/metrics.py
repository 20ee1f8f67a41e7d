"""Control-plane load metrics (SPEC §8): frames by outcome, dropped frames, open subscriptions.

Frame totals are plain integers bumped on the ingest's hot path and exposed through a
collector at scrape time: a prometheus ``Counter.inc`` per frame (a lock and a few calls)
cost more than the rest of the per-frame accounting. Module-level and registered once in
the default registry, so several control planes in one process (tests) add to the same
totals. WatchLoads streams are counted in ``fleetplane_control_watchers{stream="loads"}``
(``controlplane.server.metrics``), next to the contract watchers.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from controlplane.server.metrics import WATCHERS


class FrameTotals:
    """Frames received since the process started, by outcome."""

    __slots__ = ("dropped", "gap", "malformed", "ok", "restart")

    def __init__(self) -> None:
        self.ok = self.gap = self.restart = self.malformed = self.dropped = 0


FRAMES = FrameTotals()


class _FrameCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        frames = CounterMetricFamily(
            "fleetplane_load_frames",
            "Load frames received from engine publishers, by outcome (ok, gap, restart, malformed).",
            labels=["outcome"],
        )
        for outcome in ("ok", "gap", "restart", "malformed"):
            frames.add_metric([outcome], getattr(FRAMES, outcome))
        yield frames
        yield CounterMetricFamily(
            "fleetplane_load_dropped_frames",
            "Load frames lost to sequence gaps (sent by a publisher, never received).",
            value=FRAMES.dropped,
        )


REGISTRY.register(_FrameCollector())

LOAD_SUBSCRIPTIONS = Gauge("fleetplane_load_subscriptions", "ZMQ SUB sockets open (one per worker dp rank).")
LOAD_WATCHERS = WATCHERS.labels("loads")
