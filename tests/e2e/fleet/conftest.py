"""A whole fleet as real processes: control plane, two engine-sims, one subscribed router.

The control plane listens on a fixed free port so it can be killed and restarted where the
router expects it (SPEC §1 ``--control-plane HOST:PORT``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.router import RouterProcess

ROOT = Path(__file__).resolve().parents[3]
MODEL = "fleet-model"
ROUTER_ID = "e2e-router"


@dataclass
class Fleet:
    """The running processes and how to drive them as an operator would."""

    control: ControlPlaneProcess
    engines: tuple[EngineSim, EngineSim]
    router: RouterProcess

    def fleetplane(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``fleetplane ARGS --control-plane TARGET`` and return its result."""
        return fleetplane(self.control.target, *args, check=check)

    def fleetplane_json(self, *args: str) -> Any:
        """``fleetplane ARGS --output json`` decoded."""
        return json.loads(self.fleetplane(*args, "--output", "json").stdout)


def fleetplane(target: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The operator CLI as a process (``python -m controlplane.cli.main`` is ``fleetplane``)."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", *args, "--control-plane", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check:
        assert done.returncode == 0, f"fleetplane {args}: exit {done.returncode}: {done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy and return it; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {predicate}")
        time.sleep(interval_s)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Control plane + HTTP/1.1 engine (dp 1) + h2c engine (dp 2) + router ``--control-plane``."""
    store = tmp_path_factory.mktemp("fleet") / "control.db"
    port = free_port()
    with (
        ControlPlaneProcess("--listen", f"127.0.0.1:{port}", store_path=store) as control,
        EngineSim(
            "--model",
            MODEL,
            "--load-publish-endpoint",
            "auto",
            "--kv-events-endpoint",
            kv_endpoint_with_free_load_ports(1),
        ) as h1,
        EngineSim(
            "--model",
            MODEL,
            "--http2",
            "--dp-size",
            "2",
            "--load-publish-endpoint",
            "auto",
            "--kv-events-endpoint",
            kv_endpoint_with_free_load_ports(2),
        ) as h2c,
    ):
        for engine in (h1, h2c):
            fleetplane(control.target, "workers", "add", engine.url)
        with RouterProcess("--control-plane", control.target, "--router-id", ROUTER_ID) as router:
            yield Fleet(control, (h1, h2c), router)
