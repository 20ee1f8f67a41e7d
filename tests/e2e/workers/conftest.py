"""The worker registry as a user meets it (SPEC §6 RegisterWorker, §7 advertisement): a real
``python -m controlplane`` per module and a LoadService stub on it; workers are real
``engine-sim`` processes or ``tests.fakes.fake_workers.FakeWorker``."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlaneProcess]:
    """One control plane per module: its tests register workers on ports of their own."""
    with ControlPlaneProcess() as cp:
        yield cp


@pytest.fixture
def stub(plane: ControlPlaneProcess) -> Iterator[load_pb2_grpc.LoadServiceStub]:
    with grpc.insecure_channel(plane.target) as ch:
        yield load_pb2_grpc.LoadServiceStub(ch)
