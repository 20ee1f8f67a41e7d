"""The counts behind ``/metrics`` (SPEC §8): upstream exchanges per worker URL and protocol kept
for the router's lifetime, answers per status, as the exposition shows them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from dataplane.router.admission import Admission
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.metrics import CLIENT_GONE, OK, TIMEOUT, UNREACHABLE, RouterMetrics, count_outcome
from dataplane.router.state import RouterState
from tests.fakes.upstream import FakePool

A = "http://a:1"
B = "http://b:1"


def _upstream_lines(metrics: RouterMetrics) -> list[str]:
    """The ``fleetplane_upstream_requests_total`` lines of the exposition, in its order."""
    return [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("fleetplane_upstream_requests_total{")
    ]


def _upstream_samples(metrics: RouterMetrics) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["worker"], s.labels["protocol"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "fleetplane_upstream_requests"
        for s in family.samples
        if s.name.endswith("_total")
    }


async def test_a_removed_worker_keeps_its_upstream_counts() -> None:
    """A worker that leaves the set keeps its series; back (even serving other models) it counts on."""
    state = RouterState.standalone(None)
    metrics = RouterMetrics(state, Admission(1, 0, 1.0))
    state.apply_workers([WorkerSpec(A, "http1", ("m",)), WorkerSpec(B, "http1", ("m",))], FakePool)
    a = state.workers.by_url[A]
    a.outcomes.ok += 2
    count_outcome(a.outcomes, TIMEOUT)
    state.apply_workers([WorkerSpec(B, "http1", ("m",))], FakePool)
    assert _upstream_samples(metrics) == {(A, "http1", "ok"): 2.0, (A, "http1", "timeout"): 1.0}
    state.apply_workers([WorkerSpec(A, "http1", ("n",)), WorkerSpec(B, "http1", ("m",))], FakePool)
    back = state.workers.by_url[A]
    assert back is not a
    back.outcomes.ok += 1
    assert _upstream_samples(metrics) == {(A, "http1", "ok"): 3.0, (A, "http1", "timeout"): 1.0}


async def test_a_worker_on_another_protocol_counts_in_its_own_series() -> None:
    """The same URL over h2c is another series; the http1 one stays."""
    state = RouterState.standalone(None)
    metrics = RouterMetrics(state, Admission(1, 0, 1.0))
    state.apply_workers([WorkerSpec(A, "http1", ("m",))], FakePool)
    state.workers.by_url[A].outcomes.ok += 1
    state.apply_workers([WorkerSpec(A, "h2c", ("m",))], FakePool)
    state.workers.by_url[A].outcomes.ok += 1
    assert _upstream_samples(metrics) == {(A, "h2c", "ok"): 1.0, (A, "http1", "ok"): 1.0}


async def test_upstream_series_are_sorted_and_only_those_counted() -> None:
    """Series appear at their first count only, ordered by worker, protocol, outcome."""
    state = RouterState.standalone(None)
    metrics = RouterMetrics(state, Admission(1, 0, 1.0))
    state.apply_workers([WorkerSpec(B, "http1", ("m",)), WorkerSpec(A, "h2c", ("m",))], FakePool)
    assert _upstream_lines(metrics) == []
    count_outcome(state.workers.by_url[B].outcomes, UNREACHABLE)
    count_outcome(state.workers.by_url[B].outcomes, CLIENT_GONE)
    count_outcome(state.workers.by_url[A].outcomes, OK)
    metrics.upstream_outcome(A, "h2c", TIMEOUT)  # by URL: the same counts as the worker's
    metrics.upstream_outcome("http://gone:1", "http1", OK)  # no worker of that URL: counted still
    assert _upstream_lines(metrics) == [
        f'fleetplane_upstream_requests_total{{outcome="ok",protocol="h2c",worker="{A}"}} 1.0',
        f'fleetplane_upstream_requests_total{{outcome="timeout",protocol="h2c",worker="{A}"}} 1.0',
        f'fleetplane_upstream_requests_total{{outcome="client_gone",protocol="http1",worker="{B}"}} 1.0',
        f'fleetplane_upstream_requests_total{{outcome="unreachable",protocol="http1",worker="{B}"}} 1.0',
        'fleetplane_upstream_requests_total{outcome="ok",protocol="http1",worker="http://gone:1"} 1.0',
    ]


def test_answers_are_counted_per_status_whatever_their_order() -> None:
    """Every status is counted exactly, runs of one status and alternating ones alike."""
    metrics = RouterMetrics(RouterState.standalone(None), Admission(1, 0, 1.0))
    stats = metrics.route("/v1/chat/completions")
    statuses = [200, 200, 400, 200, 503, 503, 200, 400, 200, 200]
    for status in statuses:
        stats.observe(status, 0.002)
    assert stats.by_status == {s: statuses.count(s) for s in set(statuses)}
    assert stats.count == len(statuses) and sum(stats.buckets) == len(statuses)
    lines = [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith("fleetplane_requests_total{")
    ]
    assert lines == [
        'fleetplane_requests_total{code="200",route="/v1/chat/completions"} 6.0',
        'fleetplane_requests_total{code="400",route="/v1/chat/completions"} 2.0',
        'fleetplane_requests_total{code="503",route="/v1/chat/completions"} 2.0',
    ]
