"""Shared helpers of the control-plane audit: a real ``fleetplane control`` process and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest

from tests.fakes.control_plane import ROOT, ControlPlaneProcess


@pytest.fixture
def control_plane() -> Iterator[ControlPlaneProcess]:
    """A ``python -m controlplane`` child on 127.0.0.1:0 with its own SQLite store."""
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
