"""Router metrics (SPEC §8), rendered by prometheus-client at scrape time.

The hot path only bumps plain Python numbers (no lock, no ``.labels()`` call, no key built):
``RouteStats`` objects are created once per route and cached, a worker's upstream counts are an
object it holds (``Worker.outcomes``, one per (url, protocol) kept by ``RouterState``, so they
outlive the worker), histogram slots are ``Tally`` fields. A custom collector turns them into
metric families when ``/metrics`` is scraped, together with the gauges that are read straight
from live state (in-flight per worker, queue depth, revision, control-plane link), so those cost
nothing per request either.

Series: ``fleetplane_sampling_contract_rejections_total{scope,param}`` (absent before the first
rejection), ``fleetplane_requests_total{route,code}`` (code = HTTP status),
``fleetplane_request_duration_seconds{route}`` (histogram, streams measured to their end),
``fleetplane_upstream_requests_total{worker,protocol,outcome}``, ``fleetplane_worker_inflight{worker}``,
``fleetplane_admission_queue_depth``, ``fleetplane_contract_revision``,
``fleetplane_control_plane_connected``, ``fleetplane_control_plane_replica{address}``; with
``--api-keys``: ``fleetplane_client_requests_total{client}`` and
``fleetplane_client_rejections_total{client,param}`` (names from the key file: bounded); with
``--access-log``: ``fleetplane_access_log_dropped_total``.

Under ``--processes N`` every child's ``/metrics`` answers for the whole router: its siblings'
families are gathered at scrape time and merged (``process.metrics``, ``process.merge``).
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

import dataplane
from dataplane.http import Responder
from dataplane.router.access_log import AccessLog
from dataplane.router.admission import Admission
from dataplane.router.clients import ClientKeys
from dataplane.router.fleet.workers import UpstreamOutcomes
from dataplane.router.state import RouterState

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

# Upstream outcomes: the worker answered completely; or the exchange failed at the transport.
# Final: compiled (scripts/build_mypyc.sh), a module constant that is not Final is a dict
# lookup in the module's globals at every use.
OK: Final = "ok"
UNREACHABLE: Final = "unreachable"
BODY_INCOMPLETE: Final = "body_incomplete"
TIMEOUT: Final = "timeout"
CLIENT_GONE: Final = "client_gone"

BUCKETS_S: Final[tuple[float, ...]] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


def bucket_of(duration_s: float) -> int:
    """The histogram slot of ``duration_s``: how many bounds of ``BUCKETS_S`` lie below it
    (``bisect.bisect_left(BUCKETS_S, duration_s)``; past the largest bound, the last slot).

    A scan from the smallest bound rather than ``bisect_left``: compiled (scripts/build_mypyc.sh)
    it is a few native float comparisons (answers take milliseconds: one to five of them) where
    ``bisect_left`` is a generic call into the C module, ~800 instructions per observation. The
    bounds are written out, not read from ``BUCKETS_S``: its items are boxed floats, unboxed one
    by one (~25 instructions each) where a literal is a constant. Every bound, and each side of
    it, is checked against ``bisect_left`` over ``BUCKETS_S`` (tests/unit/router/
    test_metrics_buckets.py): the two cannot drift apart unnoticed.
    """
    d = duration_s
    # ``not d > bound`` rather than ``d <= bound``: NaN lands in slot 0, as with bisect_left.
    if not d > 0.001:
        return 0
    if not d > 0.0025:
        return 1
    if not d > 0.005:
        return 2
    if not d > 0.01:
        return 3
    if not d > 0.025:
        return 4
    if not d > 0.05:
        return 5
    if not d > 0.1:
        return 6
    if not d > 0.25:
        return 7
    if not d > 0.5:
        return 8
    if not d > 1.0:
        return 9
    if not d > 2.5:
        return 10
    if not d > 5.0:
        return 11
    if not d > 10.0:
        return 12
    if not d > 30.0:
        return 13
    if not d > 60.0:
        return 14
    if not d > 120.0:
        return 15
    if not d > 300.0:
        return 16
    return 17


class Tally:
    """One count the hot path bumps (a histogram slot, the answers of one status).

    A native object with an int field rather than an int in a list or dict: compiled
    (scripts/build_mypyc.sh), ``tally.n += 1`` is a field add, where ``counts[i] += 1`` is a
    generic in-place add (a new int object past 256) and a store.
    """

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


def _tallies() -> list[Tally]:
    return [Tally() for _ in range(len(BUCKETS_S) + 1)]  # last slot: above the largest bound


class RouteStats:
    """Counters of one route: answers by status and the duration histogram."""

    __slots__ = ("_by_status", "_last", "_last_status", "_slots", "access", "count", "route", "sum_s")

    def __init__(self, route: str, access: AccessLog | None = None) -> None:
        self.route = route
        # --access-log: every answer counted here is also a line of the access log (one place
        # that sees every answer's route, status and duration; the responder carries the rest).
        self.access = access
        self._by_status: dict[int, Tally] = {}
        # The last status counted and its tally: a route's answers mostly repeat one status,
        # counted then without a dict lookup.
        self._last_status = -1
        self._last = Tally()
        self._slots = _tallies()
        self.count = 0
        self.sum_s = 0.0

    @property
    def by_status(self) -> dict[int, int]:
        """Answers by HTTP status (every status counted at least once)."""
        return {status: tally.n for status, tally in self._by_status.items()}

    @property
    def buckets(self) -> list[int]:
        """The duration histogram: observations per slot of ``BUCKETS_S`` (not cumulative)."""
        return [tally.n for tally in self._slots]

    def observe(self, status: int, duration_s: float, responder: Responder | None = None) -> None:
        if status == self._last_status:
            self._last.n += 1
        else:
            self._count_status(status)
        self._slots[bucket_of(duration_s)].n += 1
        self.count += 1
        self.sum_s += duration_s
        access = self.access
        if access is not None:
            access.record(self.route, status, duration_s, responder)

    def _count_status(self, status: int) -> None:
        tally = self._by_status.get(status)
        if tally is None:
            tally = self._by_status[status] = Tally()
        tally.n += 1
        self._last_status = status
        self._last = tally


class Timing:
    """One duration histogram as plain numbers (slots of ``BUCKETS_S``), rendered at scrape."""

    __slots__ = ("_slots", "count", "sum_s")

    def __init__(self) -> None:
        self._slots = _tallies()
        self.count = 0
        self.sum_s = 0.0

    @property
    def buckets(self) -> list[int]:
        """Observations per slot of ``BUCKETS_S`` (not cumulative)."""
        return [tally.n for tally in self._slots]

    def observe(self, duration_s: float) -> None:
        self._slots[bucket_of(duration_s)].n += 1
        self.count += 1
        self.sum_s += duration_s


class UpstreamTiming:
    """Per worker protocol: time to the worker's response head, and to the end of its answer,
    both from the request's arrival at the router."""

    __slots__ = ("duration", "first_byte")

    def __init__(self) -> None:
        self.first_byte = Timing()
        self.duration = Timing()


def count_outcome(outcomes: UpstreamOutcomes, outcome: str) -> None:
    """Count one exchange under ``outcome`` (``OK`` ... ``CLIENT_GONE``). The request path
    bumps ``outcomes.ok`` itself on success."""
    if outcome == OK:
        outcomes.ok += 1
    else:
        failed = outcomes.failed
        failed[outcome] = failed.get(outcome, 0) + 1


class RouterMetrics:
    """Every router metric; ``render()`` is the ``/metrics`` body."""

    def __init__(
        self,
        state: RouterState,
        admission: Admission,
        keys: ClientKeys | None = None,
        access: AccessLog | None = None,
    ) -> None:
        self.state = state
        self.access = access
        self.keys = keys
        self.admission = admission
        self.routes: dict[str, RouteStats] = {}
        # By worker protocol (``UpstreamPool.protocol``); made once, read on the hot path.
        self.timing: dict[str, UpstreamTiming] = {"http1": UpstreamTiming(), "h2c": UpstreamTiming()}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        # process_* (CPU, memory, fds, start time) and python_info, as on the control plane.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        # Under ``--processes N``: the whole router's exposition (``process.metrics``), which
        # ``/metrics`` answers instead of this process's ``render()``.
        self.aggregate: Callable[[], Awaitable[bytes]] | None = None

    def route(self, name: str) -> RouteStats:
        """The cached stats of a route (create once, keep the object on the hot path)."""
        stats = self.routes.get(name)
        if stats is None:
            stats = self.routes[name] = RouteStats(name, self.access)
        return stats

    def upstream_outcome(self, url: str, protocol: str, outcome: str) -> None:
        """Count one exchange with the worker at ``url`` (its ``Worker`` or not) under ``outcome``."""
        count_outcome(self.state.outcomes_of(url, protocol), outcome)

    @property
    def upstream(self) -> dict[tuple[str, str, str], int]:
        """Exchanges by (worker URL, protocol, outcome): those counted at least once."""
        counts: dict[tuple[str, str, str], int] = {}
        for (url, protocol), outcomes in self.state.upstream_outcomes.items():
            if outcomes.ok:
                counts[(url, protocol, OK)] = outcomes.ok
            for outcome, n in outcomes.failed.items():
                counts[(url, protocol, outcome)] = n
        return counts

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector(Collector):
    def __init__(self, metrics: RouterMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        m = self._m
        state = m.state
        rejections = CounterMetricFamily(
            "fleetplane_sampling_contract_rejections",
            "Requests refused by a sampling contract, by scope and violated field (every violated field counts).",
            labels=["scope", "param"],
        )
        by_field: dict[tuple[str, str], int] = {}
        by_client: dict[tuple[str, str], int] = {}
        for (scope, param, client), n in state.rejections.items():
            by_field[(scope, param)] = by_field.get((scope, param), 0) + n
            if client:
                by_client[(client, param)] = by_client.get((client, param), 0) + n
        for (scope, param), n in sorted(by_field.items()):
            rejections.add_metric([scope, param], n)
        yield rejections
        keys = m.keys
        if keys is not None:
            client_requests = CounterMetricFamily(
                "fleetplane_client_requests",
                "Requests let through with a key of --api-keys, by client name.",
                labels=["client"],
            )
            for name, n in sorted(keys.requests.items()):
                client_requests.add_metric([name], n)
            yield client_requests
            client_rejections = CounterMetricFamily(
                "fleetplane_client_rejections",
                "Requests refused by a sampling contract, by client name and violated field.",
                labels=["client", "param"],
            )
            for (client, param), n in sorted(by_client.items()):
                client_rejections.add_metric([client, param], n)
            yield client_rejections

        requests = CounterMetricFamily(
            "fleetplane_requests", "Answers by route and HTTP status.", labels=["route", "code"]
        )
        duration = HistogramMetricFamily(
            "fleetplane_request_duration_seconds",
            "Time from request read to answer end (streams included), by route.",
            labels=["route"],
        )
        for name, stats in sorted(m.routes.items()):
            for status, n in sorted(stats.by_status.items()):
                requests.add_metric([name, str(status)], n)
            duration.add_metric([name], _buckets(stats.buckets), stats.sum_s)
        yield requests
        yield duration

        upstream = CounterMetricFamily(
            "fleetplane_upstream_requests",
            "Exchanges with workers by outcome (ok, unreachable, body_incomplete, timeout, client_gone).",
            labels=["worker", "protocol", "outcome"],
        )
        for (url, protocol, outcome), n in sorted(m.upstream.items()):
            upstream.add_metric([url, protocol, outcome], n)
        yield upstream
        if m.access is not None:
            yield CounterMetricFamily(
                "fleetplane_access_log_dropped",
                "With --access-log: lines dropped because the buffer was full or the sink refused the write.",
                value=m.access.dropped,
            )
        first_byte = HistogramMetricFamily(
            "fleetplane_upstream_first_byte_seconds",
            "Time from a request's arrival to its worker's response head, by worker protocol.",
            labels=["protocol"],
        )
        upstream_duration = HistogramMetricFamily(
            "fleetplane_upstream_duration_seconds",
            "Time from a request's arrival to the end of its worker's answer (streams included), "
            "by worker protocol.",
            labels=["protocol"],
        )
        for protocol, timing in sorted(m.timing.items()):
            first_byte.add_metric([protocol], _buckets(timing.first_byte.buckets), timing.first_byte.sum_s)
            upstream_duration.add_metric([protocol], _buckets(timing.duration.buckets), timing.duration.sum_s)
        yield first_byte
        yield upstream_duration

        inflight = GaugeMetricFamily(
            "fleetplane_worker_inflight",
            "Requests in flight per worker (this router's own count).",
            labels=["worker"],
        )
        for worker in state.workers.workers:
            inflight.add_metric([worker.url], worker.inflight)
        yield inflight
        healthy = GaugeMetricFamily(
            "fleetplane_worker_healthy",
            "1 while the worker is in rotation, 0 while ejected after consecutive failures (probed back with GET /health).",
            labels=["worker"],
        )
        for worker in state.workers.workers:
            healthy.add_metric([worker.url], 1 if worker.healthy else 0)
        yield healthy
        yield GaugeMetricFamily(
            "fleetplane_admission_queue_depth",
            "Requests waiting for an admission slot.",
            value=m.admission.queue_depth,
        )
        contracts = state.contracts
        yield GaugeMetricFamily(
            "fleetplane_contract_revision",
            "Revision of the applied contract set (-1: none received yet).",
            value=contracts.revision if contracts is not None else -1,
        )
        build = GaugeMetricFamily(
            "fleetplane_build_info",
            "Always 1; the version and Python of this process, and the form its hot path runs in "
            "(compiled: mypyc, plain: the source)",
            labels=["version", "python", "form"],
        )
        build.add_metric([_VERSION, platform.python_version(), dataplane.FORM.name], 1)
        yield build
        yield GaugeMetricFamily(
            "fleetplane_control_plane_connected",
            "1 while the control-plane streams are up (always 0 in standalone mode).",
            value=1 if state.control_plane_connected else 0,
        )
        # Info-style: one series, for the replica the router is on (none while disconnected), so
        # the label takes only addresses from --control-plane (or what its DNS name resolves to).
        # Summed over --processes N: how many of the router's processes are on that replica.
        replica = GaugeMetricFamily(
            "fleetplane_control_plane_replica",
            "1 for the control-plane replica (HOST:PORT) the router is connected to.",
            labels=["address"],
        )
        if state.control_plane_replica:
            replica.add_metric([state.control_plane_replica], 1)
        yield replica


def _package_version() -> str:
    try:
        return importlib.metadata.version("fleetplane")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


_VERSION = _package_version()


def _buckets(counts: list[int]) -> list[tuple[str, float]]:
    cumulative, buckets = 0, []
    for bound, n in zip((*BUCKETS_S, float("inf")), counts, strict=True):
        cumulative += n
        buckets.append((_bound(bound), float(cumulative)))
    return buckets


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
