"""RouterService behind the control plane's auth (SPEC §6 Auth) and on its status page (SPEC §8)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import urllib.request
from collections.abc import Awaitable
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import router_pb2, router_pb2_grpc
from dataplane.router.control.channel import control_settings
from dataplane.router.control.client import subscription
from dataplane.router.control.convert import ControlClientSettings, ControlConfigError
from tests.fakes.control_targets import FakeRouter
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.polling import eventually

TOKENS = {
    "ops": {"token": "admin-secret", "role": "admin"},
    "edge-1": {"token": "router-secret", "role": "router"},
    "grafana": {"token": "viewer-secret", "role": "viewer"},
}


def _auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def tokens_file(tmp_path: Path) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    return str(path)


async def test_router_token_subscribes_and_reports(tmp_path: Path, tokens_file: str) -> None:
    """A router with a router-role token gets snapshots and its reports reach the viewer's ListRouters."""
    router = FakeRouter()
    async with running_control_plane(tmp_path, auth_tokens=tokens_file) as plane:
        target = str(plane.grpc_address)
        settings = ControlClientSettings(
            target=target, router_id="edge-1", token="router-secret", report_check_s=0.02
        )
        async with subscription(settings, router), grpc.aio.insecure_channel(target) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)

            async def listed() -> bool:
                response = await stub.ListRouters(
                    router_pb2.ListRoutersRequest(), metadata=_auth("viewer-secret")
                )
                # Contracts too: the router-role token may watch them.
                return [r.router_id for r in response.routers if r.up_to_date] == ["edge-1"]

            await eventually(listed)
            assert router.contracts
            stats = await stub.GetRejectionStats(
                router_pb2.GetRejectionStatsRequest(), metadata=_auth("viewer-secret")
            )
            assert stats.total == 0


async def test_viewer_token_cannot_report(tmp_path: Path, tokens_file: str) -> None:
    """ReportRouterStatus needs the router or admin role: a viewer gets PERMISSION_DENIED."""
    async with (
        running_control_plane(tmp_path, auth_tokens=tokens_file) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = router_pb2_grpc.RouterServiceStub(channel)
        call = stub.ReportRouterStatus(metadata=_auth("viewer-secret"))
        with contextlib.suppress(grpc.aio.AioRpcError):
            await call.write(router_pb2.ReportRouterStatusRequest(router_id="x", boot_id="y"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListRouters(router_pb2.ListRoutersRequest())
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_status_page_shows_routers_and_rejections(tmp_path: Path) -> None:
    """The status page lists each router and the rejection counts; /metrics counts report streams."""
    router = FakeRouter()
    router.rejections[("*", "temperature", "")] = 3
    async with running_control_plane(tmp_path) as plane:
        settings = ControlClientSettings(
            target=str(plane.grpc_address), router_id="edge-<1>", report_check_s=0.02
        )
        async with subscription(settings, router):
            url = f"http://{plane.http_address}/"

            async def page_shows_router() -> bool:
                page = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
                return "edge-&lt;1&gt;" in page and "temperature" in page

            await eventually(page_shows_router)
            metrics = await asyncio.to_thread(
                lambda: urllib.request.urlopen(url + "metrics", timeout=5).read().decode()
            )
            assert 'fleetplane_control_watchers{stream="reports"} 1.0' in metrics


async def test_a_routers_ejected_workers_reach_list_routers_and_status_json(tmp_path: Path) -> None:
    """Router-side health: the workers a router reports as ejected are in ListRouters and in
    /status.json, and leave both once it reports them back in rotation."""
    router = FakeRouter()
    router.ejected = ["http://w1:8000"]
    async with running_control_plane(tmp_path) as plane:
        settings = ControlClientSettings(
            target=str(plane.grpc_address), router_id="edge-1", report_check_s=0.02
        )
        async with subscription(settings, router):
            url = f"http://{plane.http_address}/status.json"

            async def ejected() -> list[str] | None:
                doc = json.loads(
                    await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
                )
                rows = doc["sections"]["routers"]["routers"]
                return rows[0]["ejected_workers"] if rows else None

            await eventually(lambda: _equal(ejected(), ["http://w1:8000"]))
            channel = grpc.aio.insecure_channel(str(plane.grpc_address))
            async with channel:
                listed = await router_pb2_grpc.RouterServiceStub(channel).ListRouters(
                    router_pb2.ListRoutersRequest()
                )
            assert [list(r.ejected_workers) for r in listed.routers] == [["http://w1:8000"]]
            router.ejected = []
            await eventually(lambda: _equal(ejected(), []))


async def _equal(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def server_pki(tmp_path: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it."""
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server",
             "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-days", "1", "-extfile", str(d / "server.ext"), "-out", str(d / "server.pem"))  # fmt: skip
    return d


async def test_router_subscribes_over_tls_with_its_ca(tmp_path: Path, server_pki: Path) -> None:
    """With --tls-ca the router verifies the control plane's certificate and subscribes over TLS."""
    router = FakeRouter()
    async with running_control_plane(
        tmp_path, tls_cert=str(server_pki / "server.pem"), tls_key=str(server_pki / "server.key")
    ) as plane:
        settings = control_settings(str(plane.grpc_address), "tls-router", None, server_pki / "ca.pem")
        async with subscription(settings, router) as client:

            async def subscribed() -> bool:
                return client.has_snapshot and router.connected

            await eventually(subscribed)


def test_unreadable_ca_file_is_a_startup_error(tmp_path: Path) -> None:
    """A --tls-ca that cannot be read is refused at startup, naming the flag."""
    with pytest.raises(ControlConfigError, match="--tls-ca"):
        control_settings("127.0.0.1:50051", "r", None, tmp_path / "missing.pem")


def test_tls_with_several_ip_addresses_is_a_startup_error(server_pki: Path) -> None:
    """With TLS a gRPC channel verifies every replica against one name, so several IP addresses
    (each replica's certificate naming its own) would fail only at failover: refused at start."""
    with pytest.raises(ControlConfigError, match="one DNS name"):
        control_settings("10.0.0.1:50051,10.0.0.2:50051", "r", None, server_pki / "ca.pem")
    assert (
        control_settings("cp.internal:50051", "r", None, server_pki / "ca.pem").target == "cp.internal:50051"
    )
