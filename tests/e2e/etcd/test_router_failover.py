"""A router given every replica of a control plane on one etcd fails over when the one it is on
dies (kill -9) or hangs (SIGSTOP), resumes from its applied revision, and says where it is."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.etcd import EtcdServer
from tests.fakes.fleet import fleetplane, wait_for
from tests.fakes.raw_http import MODEL, engine_read, request
from tests.fakes.router import RouterProcess

BODY = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
# "Within a few seconds": a kill is seen at once, a hang after keepalive (1.5 s + 1.5 s).
FAILOVER_LIMIT_S = 8.0
REPLICA = "fleetplane_control_plane_replica"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd of this test only (skips without the binary)."""
    with EtcdServer(tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def sim() -> Iterator[EngineSim]:
    """One HTTP/1.1 engine-sim serving ``MODEL``."""
    with EngineSim("--model", MODEL) as s:
        yield s


def replica(router: RouterProcess) -> str:
    """The address label of the replica series the router shows ("" while none)."""
    on = [key for key, value in router.metrics().items() if key.startswith(REPLICA + "{") and value == 1]
    assert len(on) <= 1, on
    return on[0].split('address="', 1)[1].split('"', 1)[0] if on else ""


def routers_row(target: str, router_id: str) -> dict[str, object]:
    """The router's row of ``fleetplane routers --output json`` asked of ``target``."""
    doc = json.loads(fleetplane(target, "routers", "--output", "json").stdout)
    [row] = [r for r in doc["routers"] if r["routerId"] == router_id]
    return row  # type: ignore[no-any-return]


def snapshots_applied(router: RouterProcess) -> int:
    return sum("contract_snapshot_applied" in line for line in router.output)


def fail_over(
    planes: list[ControlPlaneProcess], router: RouterProcess, fault: Callable[[ControlPlaneProcess], None]
) -> tuple[ControlPlaneProcess, ControlPlaneProcess, float]:
    """Apply ``fault`` to the replica the router is on; (that one, the new one, seconds taken)."""
    by_target = {p.target: p for p in planes}
    on = wait_for(lambda: replica(router), 20)
    victim = by_target[on]
    started = time.monotonic()
    fault(victim)
    try:
        moved = wait_for(lambda: (r := replica(router)) not in ("", on) and r, FAILOVER_LIMIT_S, 0.05)
    except AssertionError:
        print("\n".join(router.output[-40:]))
        raise
    return victim, by_target[moved], time.monotonic() - started


def check_failover(etcd: EtcdServer, sim: EngineSim, fault: Callable[[ControlPlaneProcess], None]) -> float:
    """Three replicas, a router given all of them (comma list and a repeated flag); the fault hits
    the one it is on: it moves to another within seconds, receives no snapshot again (resumed from
    its revision), enforces a change made through a survivor, and ``fleetplane routers`` on the
    third replica shows where it is now."""
    store = etcd.url("failover")
    with (
        ControlPlaneProcess("--store", store) as a,
        ControlPlaneProcess("--store", store) as b,
        ControlPlaneProcess("--store", store) as c,
    ):
        planes = [a, b, c]
        try:
            fleetplane(a.target, "workers", "add", sim.url)
            fleetplane(a.target, "contract", "set", "--scope", "*", '{"temperature": 0.25}')
            flags = ("--control-plane", f"{a.target},{b.target}", "--control-plane", c.target)
            with RouterProcess(*flags, "--router-id", "edge-fo") as router:
                wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 1, 20)
                wait_for(lambda: request(router, "GET", "/readiness").status == 200, 20)
                before = snapshots_applied(router)
                assert before == 1
                victim, now_on, took = fail_over(planes, router, fault)
                assert router.metrics()["fleetplane_control_plane_connected"] == 1

                # Resumed from known_revision 1: the new replica had nothing to send.
                def watches_opened() -> list[int]:
                    lines = [json.loads(line) for line in now_on.log_lines if '"watch_opened"' in line]
                    return [doc["known_revision"] for doc in lines]

                assert wait_for(watches_opened, 10) == [1]
                time.sleep(1.0)
                assert snapshots_applied(router) == before
                assert router.metrics()["fleetplane_contract_revision"] == 1

                fleetplane(now_on.target, "contract", "set", "--scope", "*", '{"temperature": 0.75}')
                wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 2, 10)
                served = request(router, "POST", "/v1/completions", BODY)
                assert (served.status, engine_read(served)["temperature"]) == (200, 0.75)
                assert snapshots_applied(router) == before + 1

                [third] = [p for p in planes if p not in (victim, now_on)]
                wait_for(
                    lambda: routers_row(third.target, "edge-fo")["controlPlaneAddress"] == now_on.target, 10
                )
                row = routers_row(now_on.target, "edge-fo")
                assert (row["controlPlaneAddress"], row["connected"]) == (now_on.target, True)
                table = fleetplane(third.target, "routers").stdout
                assert "REPLICA" in table.splitlines()[0] and now_on.target in table
                print(f"failover took {took:.2f} s")
                return took
        finally:
            for plane in planes:  # a stopped one ends only once it may run again
                if plane._proc is not None and plane._proc.poll() is None:
                    os.kill(plane.pid, signal.SIGCONT)


def test_kill_9_of_the_replica_a_router_is_on_fails_over_and_resumes(
    etcd: EtcdServer, sim: EngineSim
) -> None:
    """kill -9 of the router's replica: on another within seconds, resumed, enforcing, shown."""
    took = check_failover(etcd, sim, lambda plane: plane.kill())
    assert took < FAILOVER_LIMIT_S


def test_a_hung_replica_sigstop_is_left_within_seconds(etcd: EtcdServer, sim: EngineSim) -> None:
    """SIGSTOP of the router's replica (connections stay open): keepalive notices, it fails over."""
    took = check_failover(etcd, sim, lambda plane: os.kill(plane.pid, signal.SIGSTOP))
    assert took < FAILOVER_LIMIT_S


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_dns_name_resolving_to_two_replicas_fails_over(etcd: EtcdServer, sim: EngineSim) -> None:
    """--control-plane localhost:PORT with replicas on 127.0.0.1 and [::1]: gRPC's resolver gives
    both (its c-ares resolver answers localhost with both families, RFC 6761 §6.3, without a DNS
    query); kill the one the router is on and it is on the other, enforcing a change made there."""
    if not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback (::1) on this machine")
    port = _port_free_on_both()
    store = etcd.url("dns")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_DNS_RESOLVER"}  # gRPC's default: c-ares
    with (
        ControlPlaneProcess("--store", store, "--listen", f"127.0.0.1:{port}") as v4,
        ControlPlaneProcess("--store", store, "--listen", f"[::1]:{port}") as v6,
    ):
        fleetplane(v4.target, "workers", "add", sim.url)
        fleetplane(v4.target, "contract", "set", "--scope", "*", '{"temperature": 0.25}')
        with RouterProcess(
            "--control-plane", f"localhost:{port}", "--router-id", "edge-dns", env=env
        ) as router:
            wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 1, 20)
            on = wait_for(lambda: replica(router), 20)
            assert on in (f"127.0.0.1:{port}", f"[::1]:{port}")
            victim, survivor = (v4, v6) if on.startswith("127.") else (v6, v4)
            victim.kill()
            moved = wait_for(lambda: (r := replica(router)) not in ("", on) and r, FAILOVER_LIMIT_S, 0.05)
            assert {on, moved} == {f"127.0.0.1:{port}", f"[::1]:{port}"}
            fleetplane(survivor.target, "contract", "set", "--scope", "*", '{"temperature": 0.75}')
            wait_for(lambda: router.metrics()["fleetplane_contract_revision"] == 2, 10)
            served = request(router, "POST", "/v1/completions", BODY)
            assert (served.status, engine_read(served)["temperature"]) == (200, 0.75)


def _port_free_on_both() -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET6) as six:
            six.bind(("::1", 0))
            port = int(six.getsockname()[1])
            with socket.socket(socket.AF_INET) as four:
                try:
                    four.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise AssertionError("no port free on both 127.0.0.1 and ::1")
