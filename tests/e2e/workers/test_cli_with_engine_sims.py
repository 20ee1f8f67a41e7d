"""`fleetplane workers` and `loads` against real engine-sims (SPEC §1, §6): discovery, AUTO, explicit."""

from __future__ import annotations

import json
import time

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports


def _loads(cp: ControlPlaneProcess) -> dict[str, dict[str, object]]:
    got = fleetplane("loads", "--control-plane", cp.target, "--output", "json")
    assert got.returncode == 0, got.stderr
    return {w["url"]: w for w in json.loads(got.stdout)["workers"]}


def test_auto_discovery_of_an_h2c_dp2_engine_then_removal(control_plane: ControlPlaneProcess) -> None:
    """`workers add URL` (AUTO, no endpoints) finds h2c, two load ranks and the model; loads turn FRESH."""
    flags = ("--http2", "--dp-size", "2", "--model", "sim-h2c", "--load-publish-endpoint", "auto")
    with EngineSim(*flags, "--kv-events-endpoint", kv_endpoint_with_free_load_ports(2)) as sim:
        cp = ("--control-plane", control_plane.target)
        added = fleetplane("workers", "add", sim.url, *cp, "--output", "json")
        assert added.returncode == 0, added.stderr
        worker = json.loads(added.stdout)["worker"]
        assert worker["protocol"] == "WORKER_PROTOCOL_AUTO"
        assert worker["resolvedProtocol"] == "WORKER_PROTOCOL_H2C"
        assert worker["models"] == ["sim-h2c"] and worker["dpSize"] == 2 and worker["discovered"] is True
        assert worker["discoveryError"] == ""
        deadline = time.monotonic() + 15
        while _loads(control_plane)[sim.url]["freshness"] != "FRESHNESS_FRESH":
            assert time.monotonic() < deadline, _loads(control_plane)
            time.sleep(0.2)
        view = _loads(control_plane)[sim.url]
        assert [r["dpRank"] for r in view["ranks"]] == [0, 1]
        assert int(view["maxTotalNumTokens"]) > 0
        removed = fleetplane("workers", "remove", sim.url, *cp)
        assert removed.returncode == 0 and sim.url in removed.stdout
        assert sim.url not in _loads(control_plane)
        again = fleetplane("workers", "remove", sim.url, *cp)
        assert again.returncode == 1 and "NOT_FOUND" in again.stderr


def test_an_engine_without_load_publishing_is_registered_with_the_reason(
    control_plane: ControlPlaneProcess,
) -> None:
    """Discovery that finds no load range registers the worker (HTTP/1.1, its model) and says why."""
    with EngineSim("--model", "sim-h1") as sim:
        added = fleetplane(
            "workers", "add", sim.url, "--control-plane", control_plane.target, "--output", "json"
        )
        assert added.returncode == 0, added.stderr
        worker = json.loads(added.stdout)["worker"]
        assert worker["resolvedProtocol"] == "WORKER_PROTOCOL_HTTP1" and worker["models"] == ["sim-h1"]
        assert worker["loadEndpoints"] == [] and "load" in worker["discoveryError"]
        assert _loads(control_plane)[sim.url]["freshness"] == "FRESHNESS_UNKNOWN"
