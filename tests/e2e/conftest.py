"""Acceptance tests: fleetplane as a user meets it (every folder under tests/e2e).

The black-box rule, for every test below this folder: an acceptance test drives only what a user
has — the product's processes started as a user starts them (``fleetplane ...``, ``python -m
controlplane``, ``python -m dataplane.engine.sim``) and stopped by PID, their sockets (HTTP/1.1,
h2c, gRPC, ZMQ, ``/metrics``), the CLI, and stock clients (``openai``, ``anthropic``, ``grpc`` with
the generated ``controlplane.v1`` stubs, ``h2``, ``pyzmq``, ``msgspec``). It imports no
``controlplane`` or ``dataplane`` module except the generated ``controlplane.v1`` API, and neither
do the ``tests.fakes`` helpers it uses (``tests/unit/test_test_tree.py`` checks both on the
source). A test that needs a product internal is an integration test, under tests/integration.

The fixtures here are shared by the areas: a control plane process, a channel to it, a PKI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.pki import make_pki


@pytest.fixture
def control_plane() -> Iterator[ControlPlaneProcess]:
    """A ``python -m controlplane`` child on 127.0.0.1:0 with its own SQLite store."""
    with ControlPlaneProcess() as cp:
        yield cp


@pytest.fixture(scope="module")
def shared_control_plane() -> Iterator[ControlPlaneProcess]:
    """One control plane for a module whose tests change nothing (refusals, read-only calls)."""
    with ControlPlaneProcess() as cp:
        yield cp


@pytest.fixture
def channel(control_plane: ControlPlaneProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(control_plane.target) as ch:
        yield ch


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    return make_pki(tmp_path / "pki")
