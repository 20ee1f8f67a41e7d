"""A fleet of real processes (control plane, engine-sims, a subscribed router) and the operator CLI on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.process import ROOT
from tests.fakes.router import RouterProcess

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
