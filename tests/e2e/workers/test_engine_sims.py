"""Discovery against real ``engine-sim`` processes (SPEC §1 engine-sim flags, §6, §7): what the
engine advertises is what the control plane subscribes to, and the load flows."""

from __future__ import annotations

import time
import urllib.request

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.engine_sim import EngineSim, free_port_range, kv_endpoint_with_free_load_ports
from tests.fakes.fake_workers import fresh, listed, loads, register, until

Stub = load_pb2_grpc.LoadServiceStub


def test_an_explicit_publish_range_with_three_ranks_is_discovered_and_flows(stub: Stub) -> None:
    """--load-publish-endpoint tcp://*:P --dp-size 3 (HTTP/1.1): endpoints P..P+2 on the URL's host,
    every rank FRESH, capacity summed over the ranks."""
    base = free_port_range(13)  # load ranks at base..base+2, KV events at base+10..base+12
    flags = ("--dp-size", "3", "--model", "three", "--max-total-tokens", "1000")
    with EngineSim(
        *flags, "--load-publish-endpoint", f"tcp://*:{base}", "--kv-events-endpoint", f"tcp://*:{base + 10}"
    ) as sim:
        got = register(stub, sim.url)
        assert list(got.load_endpoints) == [f"tcp://127.0.0.1:{base + r}" for r in range(3)]
        assert (got.resolved_protocol, list(got.models), got.discovery_error) == (
            pb.WORKER_PROTOCOL_HTTP1,
            ["three"],
            "",
        )
        until(lambda: fresh(stub, sim.url))
        view = loads(stub)[sim.url]
        assert [(r.dp_rank, r.freshness) for r in view.ranks] == [(r, pb.FRESHNESS_FRESH) for r in range(3)]
        assert view.max_total_num_tokens == 3000
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=sim.url), timeout=10)


def test_an_ipv6_engine_advertising_a_wildcard_is_reached_over_ipv6(stub: Stub) -> None:
    """engine-sim on [::1] --enable-http2 with tcp://[::]:P: H2C, endpoints tcp://[::1]:..., frames arrive."""
    base = free_port_range(4)
    with EngineSim(
        "--listen",
        "[::1]:0",
        "--enable-http2",  # SGLang's spelling, as an operator types it
        "--dp-size",
        "2",
        "--load-publish-endpoint",
        "auto",
        "--kv-events-endpoint",
        f"tcp://[::]:{base}",
    ) as sim:
        assert sim.url.startswith("http://[::1]:")
        got = register(stub, sim.url)
        assert list(got.load_endpoints) == [f"tcp://[::1]:{base + 2}", f"tcp://[::1]:{base + 3}"]
        assert got.resolved_protocol == pb.WORKER_PROTOCOL_H2C
        until(lambda: fresh(stub, sim.url))
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=sim.url), timeout=10)


def test_an_h2c_url_is_discovered_over_h2c(stub: Stub) -> None:
    """h2c://H:P forces prior-knowledge h2c for discovery and routing; the load still flows."""
    with EngineSim(
        "--http2",
        "--load-publish-endpoint",
        "auto",
        "--kv-events-endpoint",
        kv_endpoint_with_free_load_ports(1),
    ) as sim:
        url = sim.url.replace("http://", "h2c://")
        got = register(stub, url)
        assert (got.url, got.protocol, got.resolved_protocol) == (
            url,
            pb.WORKER_PROTOCOL_AUTO,
            pb.WORKER_PROTOCOL_H2C,
        )
        assert got.dp_size == 1 and got.discovery_error == ""
        until(lambda: fresh(stub, url))
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def test_a_worker_registered_before_its_engine_starts_is_discovered_once_it_is_up(stub: Stub) -> None:
    """Registering first (the usual order when engines load weights for minutes): the call answers
    at once with the reason, the worker is listed, and once the engine is up its endpoints, model,
    protocol and load arrive without another registration."""
    port = free_port_range(1)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    early = register(stub, url)
    assert time.monotonic() - started < 3.0
    assert "Connection refused" in early.discovery_error and list(early.load_endpoints) == []
    assert url in listed(stub)
    flags = ("--listen", f"127.0.0.1:{port}", "--http2", "--dp-size", "2", "--model", "late")
    with EngineSim(
        *flags, "--load-publish-endpoint", "auto", "--kv-events-endpoint", kv_endpoint_with_free_load_ports(2)
    ):
        up = time.monotonic()
        worker = until(lambda: (w := listed(stub)[url]).dp_size == 2 and w, timeout_s=20)
        until(lambda: fresh(stub, url))
        took = time.monotonic() - up
    assert (list(worker.models), worker.resolved_protocol, worker.discovery_error) == (
        ["late"],
        pb.WORKER_PROTOCOL_H2C,
        "",
    )
    assert took < 8.0, took
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def test_registering_a_live_worker_again_keeps_its_load_view(stub: Stub) -> None:
    """An idempotent re-run of the registration does not flap the worker to UNKNOWN or reset its counts."""
    with EngineSim(
        "--load-publish-endpoint", "auto", "--kv-events-endpoint", kv_endpoint_with_free_load_ports(1)
    ) as sim:
        register(stub, sim.url)
        until(lambda: fresh(stub, sim.url) and loads(stub)[sim.url].ranks[0].frames_received >= 2)
        before = loads(stub)[sim.url].ranks[0]
        register(stub, sim.url)
        after = loads(stub)[sim.url]
        assert after.freshness == pb.FRESHNESS_FRESH
        assert after.ranks[0].frames_received >= before.frames_received
        assert after.ranks[0].publisher_restarts == 0
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=sim.url), timeout=10)


def test_a_load_endpoint_that_is_no_publisher_harms_no_other_worker(stub: Stub) -> None:
    """An operator typo: the engine's HTTP port given as its load endpoint. That worker stays
    UNKNOWN; a real engine registered beside it stays FRESH and the control plane keeps answering."""
    with (
        EngineSim(
            "--load-publish-endpoint", "auto", "--kv-events-endpoint", kv_endpoint_with_free_load_ports(1)
        ) as sim,
        EngineSim("--model", "typo") as typo,
    ):
        register(stub, sim.url)
        wrong = register(stub, typo.url, models=("typo",), endpoints=(f"tcp://127.0.0.1:{typo.port}",))
        assert list(wrong.load_endpoints) == [f"tcp://127.0.0.1:{typo.port}"]
        until(lambda: fresh(stub, sim.url))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            views = loads(stub)
            assert views[sim.url].freshness == pb.FRESHNESS_FRESH
            assert views[typo.url].freshness == pb.FRESHNESS_UNKNOWN
            time.sleep(0.2)
        with urllib.request.urlopen(typo.url + "/health", timeout=5) as resp:
            assert resp.status == 200  # the engine did not suffer from the stray ZMTP greeting either
    for url in (sim.url, typo.url):
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
