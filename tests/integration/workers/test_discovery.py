"""Discovery over loopback against scripted HTTP/1.1 and h2c-only servers."""

from __future__ import annotations

from typing import Any

from controlplane.store.workers import Protocol
from controlplane.workers.discovery import Discoverer
from controlplane.workers.registration import parse_worker_url
from tests.fakes.load_peers import JsonServer

MODELS = {"object": "list", "data": [{"id": "sim-model", "object": "model"}]}


def info(http2: bool, base: int | None = 7001, dp: int = 2) -> dict[str, Any]:
    kv: dict[str, Any] = {"publisher": "zmq", "endpoint_host": "*", "endpoint_port_base": 7000, "dp_size": dp}
    if base is not None:
        kv |= {"load_endpoint_port_base": base, "load_topic": "load"}
    return {"enable_http2": http2, "kv_events": kv}


async def fast_sleep(_: float) -> None:
    return None


async def test_http1_worker_is_discovered() -> None:
    """AUTO over HTTP/1.1: protocol from enable_http2, endpoints per rank on the URL's host, models."""
    async with JsonServer({"/server_info": [(200, info(False))], "/v1/models": [(200, MODELS)]}) as srv:
        found = await Discoverer().discover(
            parse_worker_url(srv.url), Protocol.AUTO, want_endpoints=True, want_models=True
        )
    assert found.resolved_protocol is Protocol.HTTP1
    assert found.load_endpoints == ("tcp://127.0.0.1:7001", "tcp://127.0.0.1:7002")
    assert (found.load_topic, found.models, found.error) == ("load", ("sim-model",), "")


async def test_h2c_only_worker_is_discovered_from_an_http_url() -> None:
    """A worker that only speaks h2c prior knowledge is still read, and resolves to H2C."""
    async with JsonServer(
        {"/server_info": [(200, info(True))], "/v1/models": [(200, MODELS)]}, h2c=True
    ) as srv:
        found = await Discoverer().discover(
            parse_worker_url(srv.url), Protocol.AUTO, want_endpoints=True, want_models=True
        )
    assert found.resolved_protocol is Protocol.H2C
    assert len(found.load_endpoints) == 2 and found.models == ("sim-model",) and found.error == ""


async def test_h2c_url_is_asked_over_h2c() -> None:
    """An h2c:// URL forces H2C and is discovered over h2c."""
    async with JsonServer(
        {"/server_info": [(200, info(True, dp=1))], "/v1/models": [(200, MODELS)]}, h2c=True
    ) as srv:
        url = srv.url.replace("http://", "h2c://")
        found = await Discoverer().discover(
            parse_worker_url(url), Protocol.AUTO, want_endpoints=True, want_models=True
        )
    assert found.resolved_protocol is Protocol.H2C and found.load_endpoints == (f"tcp://127.0.0.1:{7001}",)


async def test_5xx_is_retried_then_succeeds() -> None:
    """Two 503s then a 200: discovery succeeds on the third attempt."""
    script = {"/server_info": [(503, {}), (503, {}), (200, info(False))], "/v1/models": [(200, MODELS)]}
    async with JsonServer(script) as srv:
        found = await Discoverer(sleep=fast_sleep).discover(
            parse_worker_url(srv.url), Protocol.AUTO, want_endpoints=True, want_models=False
        )
        assert srv.hits["/server_info"] == 3
    assert found.error == "" and len(found.load_endpoints) == 2


async def test_4xx_is_final_and_reported() -> None:
    """A 404 is not retried; the registration reports why there are no endpoints."""
    async with JsonServer({"/v1/models": [(200, MODELS)]}) as srv:
        found = await Discoverer(sleep=fast_sleep).discover(
            parse_worker_url(srv.url), Protocol.AUTO, want_endpoints=True, want_models=True
        )
        assert srv.hits["/server_info"] == 1
    assert found.load_endpoints == () and "HTTP 404" in found.error
    assert found.models == ("sim-model",) and found.resolved_protocol is Protocol.HTTP1


async def test_bad_json_is_final() -> None:
    """A body that is not JSON is not retried."""
    async with JsonServer({"/server_info": [(200, b"{nope")]}) as srv:
        found = await Discoverer(sleep=fast_sleep).discover(
            parse_worker_url(srv.url), Protocol.HTTP1, want_endpoints=True, want_models=False
        )
        assert srv.hits["/server_info"] == 1
    assert "not JSON" in found.error


async def test_unreachable_worker_gives_up_after_three_attempts() -> None:
    """Connection refused is retried 3 times, then reported (registration still succeeds)."""
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    found = await Discoverer(sleep=record).discover(
        parse_worker_url("http://127.0.0.1:1"), Protocol.AUTO, want_endpoints=True, want_models=False
    )
    assert slept == [0.1, 0.2]
    assert "after 3 attempts" in found.error and found.load_endpoints == ()
