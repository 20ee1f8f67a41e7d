"""Discovery against hand-written workers (SPEC §6 RegisterWorker, §7 advertisement): every odd
``/server_info`` or ``/v1/models`` answer registers the worker with a reason, never an internal
error, and never stalls the control plane."""

from __future__ import annotations

import concurrent.futures
import json
import time
import urllib.request

import grpc
import pytest

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.fake_workers import HANG, FakeWorker, listed, models, refusal, register, server_info, until
from tests.fakes.ports import free_port

Stub = load_pb2_grpc.LoadServiceStub


@pytest.mark.parametrize("wildcard", ["*", "0.0.0.0", "::", "[::]"])
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_wildcard_endpoint_host_becomes_the_worker_urls_host(stub: Stub, host: str, wildcard: str) -> None:
    """Every wildcard spelling is replaced by the URL's host, IPv6 in brackets; one endpoint per rank."""
    routes = {
        "/server_info": (200, server_info(7100, dp_size=3, host=wildcard)),
        "/v1/models": (200, models("m")),
    }
    with FakeWorker(routes, host=host) as worker:
        got = register(stub, worker.url)
    shown = f"[{host}]" if ":" in host else host
    assert list(got.load_endpoints) == [f"tcp://{shown}:{7100 + r}" for r in range(3)]
    assert (got.dp_size, got.load_topic, got.discovered, got.discovery_error) == (3, "load", True, "")
    assert list(got.models) == ["m"] and got.resolved_protocol == pb.WORKER_PROTOCOL_HTTP1


def test_auto_follows_enable_http2_and_explicit_protocols_are_kept(stub: Stub) -> None:
    """AUTO resolves to H2C when /server_info says enable_http2; HTTP1/H2C asked are kept as asked."""
    routes = {"/server_info": (200, server_info(7200, http2=True)), "/v1/models": (200, models("m"))}
    with FakeWorker(routes) as worker:
        auto = register(stub, worker.url)
        assert (auto.protocol, auto.resolved_protocol) == (pb.WORKER_PROTOCOL_AUTO, pb.WORKER_PROTOCOL_H2C)
        h1 = register(stub, worker.url, protocol=pb.WORKER_PROTOCOL_HTTP1)
        assert (h1.protocol, h1.resolved_protocol) == (pb.WORKER_PROTOCOL_HTTP1, pb.WORKER_PROTOCOL_HTTP1)
        assert list(h1.load_endpoints) == ["tcp://127.0.0.1:7200"]
        worker.routes["/server_info"] = (200, server_info(7200, http2=False))
        plain = register(stub, worker.url)
        assert plain.resolved_protocol == pb.WORKER_PROTOCOL_HTTP1


def test_explicit_models_and_endpoints_are_not_overridden_by_discovery(stub: Stub) -> None:
    """Given models win over /v1/models, given endpoints over /server_info (discovered stays false)."""
    routes = {"/server_info": (200, server_info(7300, dp_size=2)), "/v1/models": (200, models("found"))}
    with FakeWorker(routes) as worker:
        got = register(stub, worker.url, models=("given",), endpoints=("tcp://*:7400",))
        assert list(got.models) == ["given"] and list(got.load_endpoints) == ["tcp://127.0.0.1:7400"]
        assert got.discovered is False and got.dp_size == 1
        mixed = register(stub, worker.url, models=("given",))
        assert list(mixed.models) == ["given"] and mixed.dp_size == 2 and mixed.discovered is True
        assert worker.hits.get("/v1/models", 0) == 0


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        (json.dumps({"enable_http2": False}).encode(), "no kv_events"),
        (server_info(None), "does not publish load"),
        (json.dumps({"kv_events": None}).encode(), "no kv_events"),
    ],
)
def test_no_load_range_registers_the_worker_with_the_reason(stub: Stub, info: bytes, reason: str) -> None:
    """A worker that publishes no load is still registered (model, protocol) and says why."""
    with FakeWorker({"/server_info": (200, info), "/v1/models": (200, models("m"))}) as worker:
        got = register(stub, worker.url)
    assert list(got.load_endpoints) == [] and reason in got.discovery_error
    assert list(got.models) == ["m"] and got.resolved_protocol == pb.WORKER_PROTOCOL_HTTP1


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "/server_info"),
        (
            json.dumps({"kv_events": {"load_endpoint_port_base": "7000", "load_topic": "load"}}).encode(),
            "malformed",
        ),
        (json.dumps({"kv_events": {"load_endpoint_port_base": 7000, "load_topic": 5}}).encode(), "malformed"),
        (
            json.dumps({"kv_events": {"load_endpoint_port_base": True, "load_topic": "load"}}).encode(),
            "malformed",
        ),
        (
            json.dumps({"kv_events": {"load_endpoint_port_base": 70000, "load_topic": "load"}}).encode(),
            "bounds",
        ),
        (server_info(65535, dp_size=2), "bounds"),
        (server_info(7000, dp_size=5000), "bounds"),
        (server_info(7000, host=["*"]), "endpoint_host"),
        (server_info(7000, host={"h": 1}), "endpoint_host"),
        (server_info(7000, host=7), "endpoint_host"),
        (server_info(7000, host="10.0.0.1:99"), "endpoint_host"),
        (server_info(7000, host="bad host"), "endpoint_host"),
        (server_info(7000, host="h..x"), "endpoint_host"),
    ],
)
def test_a_malformed_server_info_is_a_reason_not_an_internal_error(
    stub: Stub, body: bytes, words: str
) -> None:
    """Bad JSON, wrong types, impossible ranges, a garbage host: registered with no endpoints and why."""
    with FakeWorker({"/server_info": (200, body), "/v1/models": (200, models("m"))}) as worker:
        got = register(stub, worker.url)
        assert worker.hits["/server_info"] == 1  # final, not retried
    assert list(got.load_endpoints) == [] and words in got.discovery_error
    assert list(got.models) == ["m"]
    assert listed(stub)[got.url] == got


def test_non_200_answers_4xx_final_5xx_retried(stub: Stub) -> None:
    """A 404 is asked once; a 503 three times (SGLang's discovery rules); both are reported."""
    with FakeWorker({"/server_info": (404, b"{}"), "/v1/models": (200, models("m"))}) as worker:
        got = register(stub, worker.url)
        assert worker.hits["/server_info"] == 1 and "HTTP 404" in got.discovery_error
    with FakeWorker({"/server_info": (503, b"{}"), "/v1/models": (503, b"{}")}) as worker:
        got = register(stub, worker.url)
        assert worker.hits["/server_info"] == 3 and "HTTP 503" in got.discovery_error
    assert got.url in listed(stub)


def test_a_huge_body_is_refused_without_reading_it_all(stub: Stub) -> None:
    """A 4 MiB /server_info is cut off and reported; the control plane does not keep it."""
    huge = b'{"pad": "' + b"x" * (4 << 20) + b'"}'
    with FakeWorker({"/server_info": (200, huge), "/v1/models": (200, huge)}) as worker:
        got = register(stub, worker.url)
    assert "larger than" in got.discovery_error and list(got.load_endpoints) == []


def test_discovered_models_follow_the_rules_of_given_models(stub: Stub) -> None:
    """Ids /v1/models returns are checked like RegisterWorker's models: bad ones are left out and said."""
    ids = ["ok", "a\nb", "x" * 1000, "", "ok"]
    body = json.dumps({"data": [{"id": i} for i in ids] + [{"id": 5}, "str", {"no": "id"}]}).encode()
    with FakeWorker({"/server_info": (200, server_info(7500)), "/v1/models": (200, body)}) as worker:
        got = register(stub, worker.url)
    assert list(got.models) == ["ok"]
    assert "/v1/models" in got.discovery_error
    # Given models have the same limits.
    err = refusal(lambda: register(stub, worker.url, models=("a\nb",)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and (err.details() or "").startswith("models[0]: ")


def test_discovered_models_are_capped_like_given_ones(stub: Stub) -> None:
    """A /v1/models listing thousands of ids cannot bloat the registry (and every ListWorkers)."""
    many = [f"model-{i}" for i in range(5000)]
    with FakeWorker({"/server_info": (200, server_info(7600)), "/v1/models": (200, models(*many))}) as worker:
        got = register(stub, worker.url)
    assert 0 < len(got.models) <= 256 and list(got.models) == many[: len(got.models)]
    assert "/v1/models" in got.discovery_error and "5000" in got.discovery_error
    too_many = refusal(lambda: register(stub, worker.url, models=tuple(many[:300])))
    assert too_many.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_hung_worker_bounds_the_call_and_stalls_nothing_else(stub: Stub) -> None:
    """A worker that accepts and never answers: RegisterWorker answers in bounded time with the
    reason, and meanwhile the other RPCs (list, another registration) answer at once."""
    with (
        FakeWorker({"/server_info": HANG, "/v1/models": HANG}) as hung,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        started = time.monotonic()
        pending = pool.submit(register, stub, hung.url)
        until(lambda: hung.hits.get("/server_info"), timeout_s=10)
        quick = time.monotonic()
        other = register(
            stub,
            "http://127.0.0.1:9",
            protocol=pb.WORKER_PROTOCOL_HTTP1,
            models=("m",),
            endpoints=("tcp://127.0.0.1:9",),
        )
        assert other.url in listed(stub) and hung.url not in listed(stub)
        assert time.monotonic() - quick < 2.0
        got = pending.result(timeout=30)
        took = time.monotonic() - started
    assert took < 10.0, took
    assert "no answer within" in got.discovery_error and got.url in listed(stub)


def test_a_deadline_shorter_than_discovery_is_honoured(stub: Stub) -> None:
    """With a 2 s deadline the call still answers (OK, with the reason) instead of DEADLINE_EXCEEDED."""
    with FakeWorker({"/server_info": HANG, "/v1/models": HANG}) as hung:
        started = time.monotonic()
        got = register(stub, hung.url, timeout_s=2.0)
        assert time.monotonic() - started < 2.0
    assert got.discovery_error and got.resolved_protocol == pb.WORKER_PROTOCOL_HTTP1


def test_background_discovery_survives_a_worker_with_a_poisonous_server_info(stub: Stub) -> None:
    """Two workers registered before they answer: the first comes up with a malformed /server_info,
    the second with a good one; the second is still discovered (the retry loop did not die)."""
    bad_port = free_port()
    good_port = until(lambda: (p := free_port()) != bad_port and p)
    bad_url, good_url = f"http://127.0.0.1:{bad_port}", f"http://127.0.0.1:{good_port}"
    for url in (bad_url, good_url):
        assert "Connection refused" in register(stub, url).discovery_error
    bad_routes = {"/server_info": (200, server_info(7700, host=["*"])), "/v1/models": (200, models("bad"))}
    with FakeWorker(bad_routes, port=bad_port) as bad:
        until(lambda: bad.hits.get("/server_info", 0) >= 1)
        good_routes = {
            "/server_info": (200, server_info(7800, dp_size=2)),
            "/v1/models": (200, models("good")),
        }
        with FakeWorker(good_routes, port=good_port):
            worker = until(lambda: (w := listed(stub)[good_url]).load_endpoints and w)
    assert list(worker.load_endpoints) == ["tcp://127.0.0.1:7800", "tcp://127.0.0.1:7801"]
    assert list(worker.models) == ["good"] and worker.discovery_error == ""
    assert "endpoint_host" in listed(stub)[bad_url].discovery_error


def test_what_a_worker_says_reaches_the_status_page_escaped(stub: Stub, plane: ControlPlaneProcess) -> None:
    """Model ids and /server_info text are the worker's words: the status page shows them as text."""
    evil = "<img src=x onerror=alert(1)>"
    info = json.dumps(
        {"kv_events": {"load_endpoint_port_base": "<b>7000</b>", "load_topic": "load"}}
    ).encode()
    with FakeWorker({"/server_info": (200, info), "/v1/models": (200, models(evil))}) as worker:
        got = register(stub, worker.url)
    assert list(got.models) == [evil] and "<b>7000</b>" in got.discovery_error
    with urllib.request.urlopen(plane.http_url + "/", timeout=10) as resp:
        page = resp.read().decode()
    assert worker.url in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert evil not in page and "<b>7000</b>" not in page


def test_h2c_asked_of_a_worker_that_only_speaks_http1_is_kept_but_said(stub: Stub) -> None:
    """h2c:// (or protocol H2C) on an HTTP/1.1-only worker: registered as asked, and the reply says
    the worker answered only over HTTP/1.1 (routers would fail to reach it)."""
    routes = {"/server_info": (200, server_info(7990)), "/v1/models": (200, models("m"))}
    with FakeWorker(routes) as worker:
        by_scheme = register(stub, worker.url.replace("http://", "h2c://"))
        by_field = register(stub, worker.url, protocol=pb.WORKER_PROTOCOL_H2C)
        fine = register(stub, worker.url, protocol=pb.WORKER_PROTOCOL_HTTP1)
    for got in (by_scheme, by_field):
        assert got.resolved_protocol == pb.WORKER_PROTOCOL_H2C and list(got.load_endpoints)
        assert "answered only over HTTP/1.1, not h2c" in got.discovery_error
    assert fine.discovery_error == ""
