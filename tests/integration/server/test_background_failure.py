"""A background task that dies is not hidden: its service and /healthz stop saying healthy."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controlplane.app import ControlPlane
from controlplane.server.component import AppContext, Component
from controlplane.server.contract_service import contract_component
from controlplane.server.load_service import SERVICE_NAME as LOAD_SERVICE
from controlplane.server.load_service import load_component
from controlplane.server.router_service import router_component
from controlplane.settings import ControlSettings

CONTRACT_SERVICE = "controlplane.v1.ContractService"


async def load_component_whose_task_dies(ctx: AppContext) -> Component:
    component = await load_component(ctx)

    async def dies() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the ingest broke")

    component.background.append(dies)
    return component


def _healthz(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _statuses(target: str) -> dict[str, int]:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {
            name: stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
            for name in ("", LOAD_SERVICE, CONTRACT_SERVICE)
        }


async def test_a_dead_background_task_turns_its_service_and_healthz_unhealthy(tmp_path: Path) -> None:
    """LoadService and the server report NOT_SERVING, /healthz 503 naming the task; others keep serving."""
    settings = ControlSettings.build(
        listen="127.0.0.1:0", store=f"sqlite:{tmp_path / 'control.db'}", http_listen="127.0.0.1:0"
    )
    components = (contract_component, router_component, load_component_whose_task_dies)
    async with ControlPlane(settings, components) as plane:
        assert plane.grpc_address is not None and plane.http_address is not None
        target = f"127.0.0.1:{plane.grpc_address.port}"
        http = f"http://127.0.0.1:{plane.http_address.port}"
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        for _ in range(200):  # the task dies on the loop's next turn; health follows
            statuses = await asyncio.to_thread(_statuses, target)
            if statuses[LOAD_SERVICE] == not_serving:
                break
            await asyncio.sleep(0.05)
        assert statuses == {"": not_serving, LOAD_SERVICE: not_serving, CONTRACT_SERVICE: serving}
        status, body = await asyncio.to_thread(_healthz, http)
        assert status == 503 and "background task failed" in body and "dies" in body


async def test_healthz_is_ok_while_every_task_runs(tmp_path: Path) -> None:
    """Without a failure /healthz answers 200 ok and the server is SERVING."""
    settings = ControlSettings.build(
        listen="127.0.0.1:0", store=f"sqlite:{tmp_path / 'control.db'}", http_listen="127.0.0.1:0"
    )
    async with ControlPlane(settings) as plane:
        assert plane.grpc_address is not None and plane.http_address is not None
        http = f"http://127.0.0.1:{plane.http_address.port}"
        assert await asyncio.to_thread(_healthz, http) == (200, "ok\n")
        statuses = await asyncio.to_thread(_statuses, f"127.0.0.1:{plane.grpc_address.port}")
        assert set(statuses.values()) == {health_pb2.HealthCheckResponse.SERVING}
