"""Every control-plane metric (SPEC §8), registered once per process in the default registry.

A leaf below ``server/`` and ``load/``: the servicers count watchers and contract changes, the
watch hub its streams, the ingest frames and subscriptions, each bumping the ones defined here.
Module-level and registered once, so several control planes in one process (tests) add to the
same totals.

Frame totals are plain integers bumped on the ingest's hot path and exposed through a
collector at scrape time: a prometheus ``Counter.inc`` per frame (a lock and a few calls)
cost more than the rest of the per-frame accounting.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

WATCHERS = Gauge("fleetplane_control_watchers", "Open watch streams, by stream", ["stream"])
CONTRACT_REVISION = Gauge("fleetplane_control_contract_revision", "Store revision of the live contract set")
CONTRACT_CHANGES = Counter(
    "fleetplane_control_contract_changes_total", "Contract versions written, by change kind", ["change"]
)


class FrameTotals:
    """Load frames received since the process started, by outcome."""

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

LOAD_VIEW_ERRORS = Counter(
    "fleetplane_load_view_errors_total",
    "Worker load views sent without a value that did not fit its protobuf field (logged once per episode).",
)
LOAD_SUBSCRIPTIONS = Gauge("fleetplane_load_subscriptions", "ZMQ SUB sockets open (one per worker dp rank).")
# WatchLoads streams, counted next to the contract and report watchers.
LOAD_WATCHERS = WATCHERS.labels("loads")
