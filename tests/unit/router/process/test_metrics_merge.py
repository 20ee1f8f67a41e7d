"""Merging ``--processes`` children's metric families into one router's (``process.merge``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from dataplane.router.admission import Admission
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.metrics import RouterMetrics
from dataplane.router.process.merge import ExpositionError, MergedFamilies, decode_wire
from dataplane.router.state import ContractSet, RouterState

CHAT = "/v1/chat/completions"
WORKER = "http://127.0.0.1:9"


def child(statuses: list[int], *, inflight: int = 0, revision: int | None = 0) -> RouterMetrics:
    """One child's metrics after answering ``statuses`` on the chat route (revision None: no
    contract received yet)."""
    state = RouterState(contracts=ContractSet(revision, {}) if revision is not None else None)
    state.apply_workers([WorkerSpec(WORKER, "http1", ("m",))])
    state.workers.workers[0].inflight = inflight
    metrics = RouterMetrics(state, Admission(4, 4, 1.0))
    for status in statuses:
        metrics.route(CHAT).observe(status, 0.003)
    return metrics


def merged_samples(*children: RouterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every child's families through the wire, merged, rendered, parsed back by prometheus-client."""
    merged = MergedFamilies()
    for metrics in children:
        own = MergedFamilies()
        own.add(metrics.registry.collect())
        merged.add_wire(decode_wire(own.wire()))
    text = merged.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_counters_histograms_and_inflight_are_summed() -> None:
    """Answers, duration buckets/count/sum and in-flight requests add up across children."""
    m = merged_samples(child([200, 200, 400], inflight=2), child([200], inflight=1))
    assert value(m, "fleetplane_requests_total", route=CHAT, code="200") == 3
    assert value(m, "fleetplane_requests_total", route=CHAT, code="400") == 1
    assert value(m, "fleetplane_request_duration_seconds_count", route=CHAT) == 4
    assert value(m, "fleetplane_request_duration_seconds_bucket", route=CHAT, le="0.005") == 4
    assert value(m, "fleetplane_request_duration_seconds_bucket", route=CHAT, le="0.001") == 0
    assert value(m, "fleetplane_request_duration_seconds_sum", route=CHAT) == pytest.approx(0.012)
    assert value(m, "fleetplane_worker_inflight", worker=WORKER) == 3
    assert value(m, "fleetplane_admission_queue_depth") == 0


def test_revision_and_health_take_the_lowest_child() -> None:
    """A child without a contract yet makes the router's revision -1; health is 1 only if all agree."""
    ejected = child([200], revision=7)
    ejected.state.workers.workers[0].healthy = False
    m = merged_samples(child([200], revision=7), child([], revision=5), ejected)
    assert value(m, "fleetplane_contract_revision") == 5
    assert value(m, "fleetplane_worker_healthy", worker=WORKER) == 0
    assert (
        value(merged_samples(child([], revision=7), child([], revision=None)), "fleetplane_contract_revision")
        == -1
    )
    assert value(merged_samples(child([]), child([])), "fleetplane_worker_healthy", worker=WORKER) == 1


def test_connected_only_while_every_child_is() -> None:
    """The router is connected to the control plane only while every child is."""
    a, b = child([]), child([])
    a.state.control_plane_connected = True
    assert value(merged_samples(a, b), "fleetplane_control_plane_connected") == 0
    b.state.control_plane_connected = True
    assert value(merged_samples(a, b), "fleetplane_control_plane_connected") == 1


def test_replica_series_counts_the_children_on_each_replica() -> None:
    """fleetplane_control_plane_replica: one series per replica a child is on, summed; none for
    a child on no replica."""
    a, b, c = child([]), child([]), child([])
    a.state.set_control_plane_replica("10.0.0.1:50051")
    b.state.set_control_plane_replica("10.0.0.1:50051")
    merged = merged_samples(a, b, c)
    replicas = {
        labels: v for (name, labels), v in merged.items() if name == "fleetplane_control_plane_replica"
    }
    assert replicas == {(("address", "10.0.0.1:50051"),): 2}
    c.state.set_control_plane_replica("10.0.0.2:50051")
    assert value(merged_samples(a, b, c), "fleetplane_control_plane_replica", address="10.0.0.2:50051") == 1


def test_carried_only_keeps_counters_and_histograms() -> None:
    """A snapshot (``carried_only``) holds what only goes up: no gauge survives a process."""
    own = MergedFamilies()
    own.add(child([200], inflight=5).registry.collect())
    names = {family[0] for family in decode_wire(own.wire(carried_only=True))}
    assert "fleetplane_requests" in names and "fleetplane_request_duration_seconds" in names
    assert not names & {"fleetplane_worker_inflight", "fleetplane_contract_revision"}


def test_rejections_absent_until_the_first() -> None:
    """The rejection family has no series while no child rejected anything (SPEC §8)."""
    m = merged_samples(child([200]), child([200]))
    assert not [k for k in m if k[0] == "fleetplane_sampling_contract_rejections_total"]


def test_garbage_on_the_wire_is_an_exposition_error() -> None:
    """A truncated or foreign answer from a sibling is refused, not half merged."""
    with pytest.raises(ExpositionError):
        decode_wire(b'[["fleetplane_requests", "help", "counter", [["x", {}, ')
    with pytest.raises(ExpositionError):
        decode_wire(b"# HELP fleetplane_requests_total x\n")


@given(st.lists(st.lists(st.sampled_from([200, 400, 404, 502]), max_size=20), min_size=1, max_size=5))
def test_merged_counts_equal_one_router_serving_everything(per_child: list[list[int]]) -> None:
    """However answers are spread over children, the merge shows what one process would."""
    merged = _traffic(merged_samples(*(child(statuses) for statuses in per_child)))
    alone = _traffic(merged_samples(child([s for statuses in per_child for s in statuses])))
    assert merged == pytest.approx(alone)  # _sum: float additions in another order


def _traffic(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    # process_* describe each process (N processes use N times the memory), not the traffic.
    return {key: value for key, value in samples.items() if not key[0].startswith("process_")}
