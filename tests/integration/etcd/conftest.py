"""Fixtures: one real etcd per test session, a fresh key prefix per test, control planes on it.

``control_plane`` and ``control_plane_factory`` have the same shape as the SQLite ones in
``tests/integration/controlplane/conftest.py``, so the ContractService and watch tests written for
SQLite run here unchanged against etcd.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.control_plane import running_control_plane
from tests.fakes.etcd import EtcdServer
from tests.integration.controlplane.conftest import Connected


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A single-member etcd on free loopback ports for the whole session (skips without etcd)."""
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture
def store_url(etcd: EtcdServer) -> str:
    """``--store`` for this test: the shared etcd under a prefix no other test uses."""
    return etcd.url(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def control_plane(tmp_path: Path, store_url: str) -> AsyncIterator[Connected]:
    """A control plane on etcd without auth, and a ContractService stub on it."""
    async with (
        running_control_plane(tmp_path, store=store_url) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        yield Connected(plane, channel, contract_pb2_grpc.ContractServiceStub(channel))


@pytest.fixture
def control_plane_factory(
    tmp_path: Path, store_url: str
) -> Callable[..., AbstractAsyncContextManager[ControlPlane]]:
    """``async with control_plane_factory(**settings) as plane``: every plane on the test's prefix."""

    def factory(**settings: Any) -> AbstractAsyncContextManager[ControlPlane]:
        settings.setdefault("store", store_url)
        return running_control_plane(tmp_path, **settings)

    return factory
