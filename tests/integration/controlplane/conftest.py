"""Fixtures: an in-process control plane on 127.0.0.1:0 and async stubs connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.control_plane import running_control_plane


@dataclass
class Connected:
    plane: ControlPlane
    channel: grpc.aio.Channel
    contracts: contract_pb2_grpc.ContractServiceStub

    @property
    def target(self) -> str:
        return str(self.plane.grpc_address)


@pytest.fixture
async def control_plane(tmp_path: Path) -> AsyncIterator[Connected]:
    """A running control plane without auth, and a ContractService stub on it."""
    async with (
        running_control_plane(tmp_path) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        yield Connected(plane, channel, contract_pb2_grpc.ContractServiceStub(channel))


@pytest.fixture
def control_plane_factory(
    tmp_path: Path,
) -> Callable[..., AbstractAsyncContextManager[ControlPlane]]:
    """``async with control_plane_factory(auth_tokens=...) as plane`` (ControlSettings keywords)."""

    def factory(**settings: Any) -> AbstractAsyncContextManager[ControlPlane]:
        return running_control_plane(tmp_path, **settings)

    return factory
