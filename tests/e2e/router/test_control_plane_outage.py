"""A router subscribed to a control plane that starts late, goes away and comes back (SPEC §1, §3.2, §5, §8)."""

from __future__ import annotations

import json
import os

import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import fleetplane, wait_for
from tests.fakes.ports import free_port
from tests.fakes.raw_http import MODEL, engine_read, envelope, request
from tests.fakes.router import RouterProcess

BODY = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()


def connected(r: RouterProcess) -> float:
    return r.metrics()["fleetplane_control_plane_connected"]


def replicas(r: RouterProcess) -> dict[str, float]:
    """``fleetplane_control_plane_replica`` by address."""
    prefix = 'fleetplane_control_plane_replica{address="'
    return {k[len(prefix) : -2]: v for k, v in r.metrics().items() if k.startswith(prefix)}


def test_router_follows_the_control_plane_through_its_absence(
    sim: EngineSim, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Configured by FLEETPLANE_CONTROL_PLANE/FLEETPLANE_ROUTER_ID before the control plane runs:
    503 contract_unavailable until the first snapshot; contracts apply per scope; through an
    outage the last contract is enforced and connected drops to 0; after it a change applies."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    store = tmp_path_factory.mktemp("cp") / "control.db"
    env = {**os.environ, "FLEETPLANE_CONTROL_PLANE": target, "FLEETPLANE_ROUTER_ID": "audit-edge"}
    with RouterProcess(env=env) as router:
        waiting = request(router, "POST", "/v1/completions", BODY)
        assert (waiting.status, envelope(waiting)["code"]) == (503, "contract_unavailable")
        assert request(router, "GET", "/readiness").status == 503
        assert router.metrics()["fleetplane_contract_revision"] == -1

        control = ControlPlaneProcess("--listen", target, store_path=store)
        with control:
            fleetplane(target, "workers", "add", sim.url)
            fleetplane(target, "contract", "set", "--scope", "*", '{"temperature": 0.25}')
            fleetplane(target, "contract", "set", "--scope", MODEL, '{"temperature": 0.75, "n": 1}')
            wait_for(lambda: request(router, "GET", "/readiness").status == 200, 20)
            wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 2, 10)
            served = request(router, "POST", "/v1/completions", BODY)
            # The model's own scope wins; no merging with "*" (SPEC §3.2).
            assert (engine_read(served)["temperature"], served.headers["x-contract-revision"]) == (0.75, "2")
            routers = json.loads(fleetplane(target, "routers", "--output", "json").stdout)
            assert "audit-edge" in json.dumps(routers)
            assert connected(router) == 1
            # The one replica it is on, named as --control-plane names it; in the rollout view too.
            assert replicas(router) == {target: 1.0}
            assert routers["routers"][0]["controlPlaneAddress"] == target

        wait_for(lambda: connected(router) == 0, 10)
        assert replicas(router) == {}
        refused = request(router, "POST", "/v1/completions", BODY[:-1] + b',"temperature":0.25}')
        assert (refused.status, envelope(refused)["param"]) == (400, "temperature")
        assert request(router, "GET", "/readiness").status == 200

        with control:  # same port, same store
            wait_for(lambda: connected(router) == 1, 20)
            fleetplane(target, "contract", "delete", "--scope", MODEL)
            wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 3, 10)
            served = request(router, "POST", "/v1/completions", BODY)
            assert engine_read(served)["temperature"] == 0.25  # now judged by "*"


def test_a_refused_token_is_not_connected(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A router whose --token the control plane refuses shows fleetplane_control_plane_connected 0
    (the channel is up, but no stream is); with the right token it shows 1."""
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.json"
    tokens.write_text(json.dumps({"edge": {"token": "t-router", "role": "router"}}))
    with ControlPlaneProcess("--auth-tokens", str(tokens)) as control:
        with RouterProcess("--control-plane", control.target, "--token", "t-wrong") as refused:
            wait_for(lambda: any("control_plane_stream_failed" in line for line in refused.output), 10)
            assert connected(refused) == 0
            assert request(refused, "GET", "/readiness").status == 503
        with RouterProcess("--control-plane", control.target, "--token", "t-router") as accepted:
            wait_for(lambda: connected(accepted) == 1, 10)
