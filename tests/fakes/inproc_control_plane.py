"""A control plane in-process on the running event loop (integration tests), and stubs on it::

    async with running_control_plane(tmp_path, auth_tokens=str(path)) as plane:
        plane.grpc_address, plane.http_address, plane.store

The acceptance tests never use this (they run ``tests.fakes.control_plane.ControlPlaneProcess``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from controlplane.app import ControlPlane
from controlplane.settings import ControlSettings
from controlplane.v1 import contract_pb2_grpc


@contextlib.asynccontextmanager
async def running_control_plane(tmp_path: Path, **settings: Any) -> AsyncIterator[ControlPlane]:
    """An in-process control plane on 127.0.0.1:0 with its SQLite store under ``tmp_path``.

    ``settings`` are ``ControlSettings.build`` keywords (e.g. ``auth_tokens=...``).
    """
    settings.setdefault("listen", "127.0.0.1:0")
    settings.setdefault("store", f"sqlite:{tmp_path / 'control.db'}")
    settings.setdefault("http_listen", "127.0.0.1:0")
    async with ControlPlane(ControlSettings.build(**settings)) as plane:
        yield plane


@dataclass
class Connected:
    plane: ControlPlane
    channel: grpc.aio.Channel
    contracts: contract_pb2_grpc.ContractServiceStub

    @property
    def target(self) -> str:
        return str(self.plane.grpc_address)
