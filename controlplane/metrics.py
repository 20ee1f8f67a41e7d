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

import importlib.metadata
import platform
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


def package_version() -> str:
    """fleetplane's version from its package metadata (``fleetplane --version``, build info)."""
    try:
        return importlib.metadata.version("fleetplane")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


# The default registry already carries prometheus-client's process and platform collectors
# (process_*, python_info); this names the build, as every Prometheus-instrumented service does.
BUILD_INFO = Gauge(
    "fleetplane_build_info", "Always 1; the version and Python of this process", ["version", "python"]
)
BUILD_INFO.labels(package_version(), platform.python_version()).set(1)

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


# Gauges read from live state at scrape time (the load table, the rollout board): the components
# register a source when they start and drop it at shutdown, so several control planes in one
# process (tests) each count once, and a stopped one not at all.
FreshnessSource = Callable[[], Mapping[str, int]]  # freshness name -> workers
RouterSource = Callable[
    [], Iterable[tuple[str, int, bool, bool]]
]  # (router_id, applied, connected, up to date)
_FRESHNESS_SOURCES: list[FreshnessSource] = []
_ROUTER_SOURCES: list[RouterSource] = []
FRESHNESS_STATES = ("FRESH", "STALE", "UNKNOWN")


def add_freshness_source(source: FreshnessSource) -> Callable[[], None]:
    """Count ``source``'s workers in ``fleetplane_load_workers``; returns the undo."""
    _FRESHNESS_SOURCES.append(source)
    return lambda: _FRESHNESS_SOURCES.remove(source)


def add_router_source(source: RouterSource) -> Callable[[], None]:
    """Count ``source``'s routers in ``fleetplane_control_routers``; returns the undo."""
    _ROUTER_SOURCES.append(source)
    return lambda: _ROUTER_SOURCES.remove(source)


class _StateCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        workers = GaugeMetricFamily(
            "fleetplane_load_workers",
            "Registered workers by load freshness: FRESH (a frame from every rank within "
            "--load-stale-after-s), STALE (a rank went silent), UNKNOWN (no frame yet, or no publisher).",
            labels=["freshness"],
        )
        counts = dict.fromkeys(FRESHNESS_STATES, 0)
        for source in _FRESHNESS_SOURCES:
            for state, n in source().items():
                counts[state] = counts.get(state, 0) + n
        for state, n in counts.items():
            workers.add_metric([state], n)
        yield workers
        routers = GaugeMetricFamily(
            "fleetplane_control_routers",
            "Routers in the rollout view, by whether a report stream is open and whether the "
            "contract revision they applied is the current one.",
            labels=["connected", "up_to_date"],
        )
        applied = GaugeMetricFamily(
            "fleetplane_control_router_applied_revision",
            "Contract revision each router last reported as applied (compare with "
            "fleetplane_control_contract_revision).",
            labels=["router"],
        )
        states = {(c, u): 0 for c in ("true", "false") for u in ("true", "false")}
        for routers_of in _ROUTER_SOURCES:
            for router_id, revision, connected, up_to_date in routers_of():
                states[(_flag(connected), _flag(up_to_date))] += 1
                applied.add_metric([router_id], revision)
        for labels, n in states.items():
            routers.add_metric(list(labels), n)
        yield routers
        yield applied


def _flag(value: bool) -> str:
    return "true" if value else "false"


REGISTRY.register(_StateCollector())
