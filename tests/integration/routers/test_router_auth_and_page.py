"""RouterService behind the control plane's auth (SPEC §6 Auth) and on its status page (SPEC §8)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import router_pb2, router_pb2_grpc
from dataplane.router.control import subscription
from dataplane.router.subscription import ControlSettings
from tests.fakes.control_plane import running_control_plane

from .conftest import eventually
from .test_control_client import FakeRouter

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
        settings = ControlSettings(
            target=target, router_id="edge-1", token="router-secret", report_check_s=0.02
        )
        async with subscription(settings, router), grpc.aio.insecure_channel(target) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)

            async def listed() -> bool:
                response = await stub.ListRouters(
                    router_pb2.ListRoutersRequest(), metadata=_auth("viewer-secret")
                )
                return [r.router_id for r in response.routers if r.connected] == ["edge-1"]

            await eventually(listed)
            assert router.contracts, "the router-role token may watch contracts"
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
    """The status page lists each router with its applied revision, and the rejection counts."""
    router = FakeRouter()
    router.rejections[("*", "temperature")] = 3
    async with running_control_plane(tmp_path) as plane:
        settings = ControlSettings(target=str(plane.grpc_address), router_id="edge-<1>", report_check_s=0.02)
        async with subscription(settings, router):
            url = f"http://{plane.http_address}/"

            async def page_shows_router() -> bool:
                page = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
                return "edge-&lt;1&gt;" in page and "temperature" in page

            await eventually(page_shows_router)
