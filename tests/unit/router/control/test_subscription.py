"""What the router takes from the control plane: snapshots, registry entries, load views, backoff."""

from __future__ import annotations

import random

import pytest

from controlplane.contracts import Band, ConflictPolicy, ContractError, Exact
from controlplane.v1 import contract_pb2, load_pb2
from dataplane.router.control.backoff import Backoff
from dataplane.router.control.convert import (
    EngineLoad,
    LoadViews,
    check_target,
    engine_load,
    grpc_target,
    replica_address,
    snapshot_contracts,
    worker_specs,
)
from dataplane.router.fleet.workers import WorkerSpec


def _contract(scope: str, **params: contract_pb2.ParamSpec) -> contract_pb2.Contract:
    return contract_pb2.Contract(scope=scope, params=params, conflict=contract_pb2.CONFLICT_POLICY_REJECT)


def test_snapshot_converts_every_scope() -> None:
    """A snapshot becomes one validated contract per scope, integral fields as integers."""
    snapshot = contract_pb2.WatchContractsResponse(
        revision=9,
        contracts=[
            _contract("*", temperature=contract_pb2.ParamSpec(exact=1.0)),
            _contract(
                "llama",
                top_k=contract_pb2.ParamSpec(band=contract_pb2.Band(min=1, max=50, default=40)),
            ),
        ],
    )
    contracts = snapshot_contracts(snapshot)
    assert contracts["*"].params == {"temperature": Exact(1.0)}
    assert contracts["*"].conflict is ConflictPolicy.REJECT
    band = contracts["llama"].params["top_k"]
    assert band == Band(1, 50, 40) and isinstance(band, Band) and isinstance(band.default, int)


def test_empty_snapshot_means_no_contracts() -> None:
    """A snapshot with no scopes converts to an empty set (requests are not judged)."""
    assert snapshot_contracts(contract_pb2.WatchContractsResponse(revision=3)) == {}


def test_invalid_snapshot_is_refused_naming_scope_and_field() -> None:
    """A contract outside the §2 domain is refused with the scope and the field in the message."""
    snapshot = contract_pb2.WatchContractsResponse(
        revision=2, contracts=[_contract("llama", top_p=contract_pb2.ParamSpec(exact=1.5))]
    )
    with pytest.raises(ContractError, match=r"scope 'llama'.*top_p"):
        snapshot_contracts(snapshot)


def test_a_scope_sent_twice_is_refused() -> None:
    """Two contracts for one scope in one snapshot is refused rather than one silently winning."""
    one = _contract("*", n=contract_pb2.ParamSpec(exact=1))
    with pytest.raises(ContractError, match="twice"):
        snapshot_contracts(contract_pb2.WatchContractsResponse(revision=1, contracts=[one, one]))


def test_worker_protocol_follows_the_resolved_protocol_or_the_url() -> None:
    """Resolved H2C or an h2c:// URL means h2c; everything else HTTP/1.1; bad URLs are skipped."""
    specs, errors = worker_specs(
        [
            load_pb2.Worker(
                url="http://127.0.0.1:9001", resolved_protocol=load_pb2.WORKER_PROTOCOL_HTTP1, models=["m"]
            ),
            load_pb2.Worker(
                url="http://127.0.0.1:9002", resolved_protocol=load_pb2.WORKER_PROTOCOL_H2C, models=["m"]
            ),
            load_pb2.Worker(url="h2c://127.0.0.1:9003", models=["a", "b"]),
            load_pb2.Worker(url="ftp://nope", models=["m"]),
        ]
    )
    assert specs == [
        WorkerSpec("http://127.0.0.1:9001", "http1", ("m",)),
        WorkerSpec("http://127.0.0.1:9002", "h2c", ("m",)),
        WorkerSpec("h2c://127.0.0.1:9003", "h2c", ("a", "b")),
    ]
    assert len(errors) == 1 and "ftp://nope" in errors[0]


def test_engine_load_counts_only_while_fresh() -> None:
    """FRESH views are marked fresh; STALE and UNKNOWN are not."""
    fresh = load_pb2.WorkerLoad(
        url="u", num_running_reqs=3, num_waiting_reqs=2, freshness=load_pb2.FRESHNESS_FRESH
    )
    stale = load_pb2.WorkerLoad(url="u", num_running_reqs=3, freshness=load_pb2.FRESHNESS_STALE)
    assert engine_load(fresh) == EngineLoad(3, 2, True)
    assert engine_load(stale).fresh is False


def test_engine_load_carries_the_full_loadstat_or_none() -> None:
    """SGLang 0.5.23's appended counts reach the router's view; an older engine's are None."""
    full = load_pb2.WorkerLoad(
        url="u",
        num_running_reqs=3,
        num_waiting_reqs=2,
        num_tokens=900,
        max_total_num_tokens=4096,
        freshness=load_pb2.FRESHNESS_FRESH,
        num_waiting_uncached_tokens=700,
        num_total_tokens=1600,
        max_running_requests=8,
        total_prefill_uncached_tokens=10,
        total_prefill_busy_us=20,
    )
    assert engine_load(full, 500.0) == EngineLoad(3, 2, True, 900, 4096, 700, 1600, 8, 500.0)
    old = engine_load(load_pb2.WorkerLoad(url="u", num_running_reqs=3, freshness=load_pb2.FRESHNESS_FRESH))
    assert (old.waiting_uncached_tokens, old.total_tokens, old.max_running) == (None, None, None)


def test_prefill_rate_follows_the_deltas_of_the_cumulative_counters() -> None:
    """Tokens per second of prefill time between views; the lifetime average before any delta and
    after a counter went back (a restarted engine); unchanged while the engine does not prefill."""
    views = LoadViews()
    w = load_pb2.WorkerLoad

    def rate(tokens: int, busy_us: int) -> float | None:
        view = w(url="a", total_prefill_uncached_tokens=tokens, total_prefill_busy_us=busy_us)
        views.fold(load_pb2.WatchLoadsResponse(workers=[view]))
        return views.views["a"].prefill_tokens_per_s

    assert rate(0, 0) is None
    assert rate(3000, 100_000) == pytest.approx(30_000)  # first delta
    assert rate(4000, 150_000) == pytest.approx(20_000)
    assert rate(4000, 150_000) == pytest.approx(20_000)  # idle: the last measured
    assert rate(500, 10_000) == pytest.approx(50_000)  # restarted: its lifetime average
    views.fold(load_pb2.WatchLoadsResponse(workers=[w(url="b")]))
    assert views.views["b"].prefill_tokens_per_s is None  # a six-position engine


def test_load_views_fold_full_then_deltas() -> None:
    """A full message replaces the view; deltas update changed workers and drop removed ones."""
    views = LoadViews()
    w = load_pb2.WorkerLoad
    views.fold(load_pb2.WatchLoadsResponse(full=True, workers=[w(url="a", num_running_reqs=1), w(url="b")]))
    named = views.fold(
        load_pb2.WatchLoadsResponse(workers=[w(url="a", num_running_reqs=5)], removed_urls=["b"])
    )
    assert named == {"a", "b"}
    assert list(views.views) == ["a"] and views.views["a"].running == 5
    views.fold(load_pb2.WatchLoadsResponse(full=True, workers=[w(url="c")]))
    assert list(views.views) == ["c"]


def test_backoff_grows_with_jitter_up_to_the_cap_and_resets() -> None:
    """Delays double (jittered in [ceiling/2, ceiling]) up to the cap; reset starts over."""
    backoff = Backoff(0.1, 1.0, random.Random(7))
    delays = [backoff.next_delay_s() for _ in range(8)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    backoff.reset()
    assert backoff.next_delay_s() <= 0.1


@pytest.mark.parametrize("target", ["127.0.0.1:50051", "[::1]:50051", "cp.internal:443"])
def test_good_targets_pass(target: str) -> None:
    """HOST:PORT targets, IPv6 in brackets, are accepted as given."""
    assert check_target(target) == target


@pytest.mark.parametrize(
    ("entries", "target"),
    [
        (("127.0.0.1:50051",), "127.0.0.1:50051"),  # one address: exactly as before
        (("cp.internal:443",), "cp.internal:443"),
        (("10.0.0.1:1", "10.0.0.2:2"), "ipv4:10.0.0.1:1,10.0.0.2:2"),
        (("[::1]:1", "[fd00::2]:2"), "ipv6:[::1]:1,[fd00::2]:2"),
    ],
)
def test_replicas_become_one_grpc_target(entries: tuple[str, ...], target: str) -> None:
    """Several replicas become gRPC's own multi-address target, so pick_first fails over."""
    assert grpc_target(entries) == target


@pytest.mark.parametrize(
    ("subchannel", "address"),
    [("ipv4:127.0.0.1:50051", "127.0.0.1:50051"), ("ipv6:%5B::1%5D:50051", "[::1]:50051")],
)
def test_a_subchannel_address_reads_as_host_port(subchannel: str, address: str) -> None:
    """channelz's subchannel target is shown as the HOST:PORT form --control-plane takes."""
    assert replica_address(subchannel) == address
