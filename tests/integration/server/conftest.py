"""Fixtures: an in-process control plane on 127.0.0.1:0 and async stubs connected to it, and bare
RouterService servers.

The control plane's store is SQLite under the test's ``tmp_path`` unless a module parametrizes
``store_location`` with ``"etcd"`` (indirect): then it is a fresh key prefix on the session's etcd,
so one test body checks both backends (SPEC §3.2, §6: both backends, one behaviour).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.etcd import EtcdServer
from tests.fakes.inproc_control_plane import Connected, running_control_plane
from tests.fakes.router_service import RouterPlane, start_router_plane


@pytest.fixture
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """``--store`` of the control plane: ``sqlite:`` under ``tmp_path``, or (param ``"etcd"``) a fresh
    prefix on the session's etcd that no other test uses."""
    if getattr(request, "param", "sqlite") == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd")
        return etcd.url(f"t-{uuid.uuid4().hex[:12]}")
    return f"sqlite:{tmp_path / 'control.db'}"


@pytest.fixture
async def control_plane(tmp_path: Path, store_location: str) -> AsyncIterator[Connected]:
    """A running control plane without auth, and a ContractService stub on it."""
    async with (
        running_control_plane(tmp_path, store=store_location) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        yield Connected(plane, channel, contract_pb2_grpc.ContractServiceStub(channel))


@pytest.fixture
def control_plane_factory(
    tmp_path: Path, store_location: str
) -> Callable[..., AbstractAsyncContextManager[ControlPlane]]:
    """``async with control_plane_factory(auth_tokens=...) as plane`` (ControlSettings keywords)."""

    def factory(**settings: Any) -> AbstractAsyncContextManager[ControlPlane]:
        settings.setdefault("store", store_location)
        return running_control_plane(tmp_path, **settings)

    return factory


@pytest.fixture
async def plane_factory(tmp_path: Path) -> AsyncIterator[Callable[[list[int]], Awaitable[RouterPlane]]]:
    """Start RouterService instances over one DB file; every one still running is stopped at the end."""
    planes: list[RouterPlane] = []

    async def make(revision: list[int]) -> RouterPlane:
        plane = await start_router_plane(tmp_path / "fleet.db", revision)
        planes.append(plane)
        return plane

    yield make
    for plane in planes:
        await plane.stop()
