"""Router /metrics as a scraper sees it (SPEC §8), on a router of its own (exact counts)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.engine_sim import EngineSim
from tests.fakes.h2c import h2c_requests
from tests.fakes.raw_http import CONTRACT, MODEL, exchange, request
from tests.fakes.router import RouterProcess, series

REJECTIONS = "fleetplane_sampling_contract_rejections_total"
REQUESTS = "fleetplane_requests_total"


@pytest.fixture
def fresh(sim: EngineSim) -> Iterator[RouterProcess]:
    """A new router (no request yet) with a small body limit."""
    with RouterProcess(
        "--worker", sim.url, "--override-sampling-params", CONTRACT, "--max-body-bytes", "1000"
    ) as r:
        yield r


def test_exposition_parses_and_names_every_spec_family(fresh: RouterProcess) -> None:
    """/metrics is valid Prometheus text with every SPEC §8 router family, and no rejection
    series before the first rejection."""
    answer = request(fresh, "GET", "/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.body.decode())}
    for name in (
        "fleetplane_requests",
        "fleetplane_request_duration_seconds",
        "fleetplane_upstream_requests",
        "fleetplane_worker_inflight",
        "fleetplane_admission_queue_depth",
        "fleetplane_contract_revision",
        "fleetplane_control_plane_connected",
    ):
        assert name in families, name
    assert REJECTIONS + "{" not in answer.body.decode()
    m = fresh.metrics()
    assert m["fleetplane_contract_revision"] == 0
    assert m["fleetplane_control_plane_connected"] == 0


def test_every_violated_field_is_counted_under_its_scope(fresh: RouterProcess, sim: EngineSim) -> None:
    """One request violating top_p and n counts one rejection for each, scope "*"; a served
    request counts an upstream exchange for its worker."""
    bad = {"model": MODEL, "prompt": "x", "top_p": 0.95, "n": 2}
    assert request(fresh, "POST", "/v1/completions", json.dumps(bad).encode()).status == 400
    ok = {"model": MODEL, "prompt": "x", "max_tokens": 1}
    assert request(fresh, "POST", "/v1/completions", json.dumps(ok).encode()).status == 200
    m = fresh.metrics()
    assert m[series(REJECTIONS, scope="*", param="top_p")] == 1
    assert m[series(REJECTIONS, scope="*", param="n")] == 1
    assert not any(k.startswith(REJECTIONS + "{") and "temperature" in k for k in m)
    assert m[series(REQUESTS, route="/v1/completions", code="400")] == 1
    assert m[series(REQUESTS, route="/v1/completions", code="200")] == 1
    assert (
        m[series("fleetplane_upstream_requests_total", worker=sim.url, protocol="http1", outcome="ok")] == 1
    )
    assert m[series("fleetplane_worker_inflight", worker=sim.url)] == 0


def test_refusals_by_the_http_server_are_counted(fresh: RouterProcess) -> None:
    """413s (announced, chunked, h2c) and a malformed request count in fleetplane_requests_total."""
    assert request(fresh, "POST", "/v1/chat/completions", b" " * 1001).status == 413
    exchange(
        fresh,
        b"POST /generate HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n7d1\r\n" + b" " * 2001,
    )
    [(headers, _)] = h2c_requests(fresh, [("POST", "/v1/chat/completions", b" " * 1001)])
    assert headers[":status"] == "413"
    exchange(fresh, b"NOT HTTP AT ALL\r\n\r\n")
    m = fresh.metrics()
    assert m[series(REQUESTS, route="/v1/chat/completions", code="413")] == 2
    assert m[series(REQUESTS, route="/generate", code="413")] == 1
    assert m[series(REQUESTS, route="other", code="400")] == 1
