"""Shared helpers of the control-plane audit: a real ``fleetplane control`` process and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.fakes.control_plane import ROOT, ControlPlaneProcess
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


def fleetplane(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``fleetplane ARGS`` (the console script's entry point) and capture its output."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from controlplane.cli.main import main; sys.exit(main())", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=40,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    return make_pki(tmp_path / "pki")
