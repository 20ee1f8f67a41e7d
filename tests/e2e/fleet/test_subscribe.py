"""A router started with ``--control-plane`` before the control plane is there (SPEC §1, §5)."""

from __future__ import annotations

import subprocess
import sys

from tests.fakes.chat_client import chat, error_of, post
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import MODEL, fleetplane, wait_for
from tests.fakes.ports import free_port
from tests.fakes.process import ROOT
from tests.fakes.router import RouterProcess, series


def test_router_waits_for_the_first_snapshot_then_serves() -> None:
    """Before any snapshot: not ready and judged requests get 503 contract_unavailable; once the
    control plane appears (with a worker) the router catches up without a restart."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    with RouterProcess("--control-plane", target, "--router-id", "early") as router:
        assert router.get("/readiness")[0] == 503
        status, headers, body = post(router.url, "/v1/chat/completions", chat(MODEL))
        assert error_of(status, headers, body)[:2] == (503, "contract_unavailable")
        assert router.metrics()[series("fleetplane_control_plane_connected")] == 0
        with ControlPlaneProcess("--listen", target) as control, EngineSim("--model", MODEL) as engine:
            fleetplane(control.target, "workers", "add", engine.url)
            wait_for(lambda: router.get("/readiness")[0] == 200, timeout_s=15, interval_s=0.1)
            status, _, _ = post(router.url, "/v1/chat/completions", chat(MODEL))
            assert status == 200


def test_worker_and_contract_flags_are_refused_with_control_plane() -> None:
    """``--worker`` or a contract flag next to ``--control-plane`` is a startup error naming the flag."""
    for extra in (["--worker", "http://127.0.0.1:9"], ["--override-sampling-params", '{"n": 1}']):
        done = subprocess.run(
            [sys.executable, "-m", "dataplane", "--control-plane", "127.0.0.1:1", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode != 0
        assert extra[0] in done.stderr and "--control-plane" in done.stderr
