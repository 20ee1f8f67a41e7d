"""The worker registry across crashes and restarts (SPEC §6 Durability: an acknowledged write
survives kill -9) and the ingest reconnecting to what it lists."""

from __future__ import annotations

import json
import sqlite3

import grpc

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.fake_workers import FakeWorker, fresh, listed, models, register, server_info, until
from tests.fakes.ports import free_port


def test_a_discovered_worker_survives_kill_9_right_after_the_ack_and_its_load_flows_again() -> None:
    """RegisterWorker acknowledged, then SIGKILL at once: after a restart the worker is listed as
    acknowledged (discovered endpoints, protocol, models) and its two ranks turn FRESH again; the
    same after a graceful restart."""
    sim_flags = ("--http2", "--dp-size", "2", "--model", "durable", "--load-publish-endpoint", "auto")
    with (
        EngineSim(*sim_flags, "--kv-events-endpoint", kv_endpoint_with_free_load_ports(2)) as sim,
        ControlPlaneProcess() as cp,
    ):
        with grpc.insecure_channel(cp.target) as channel:
            acked = register(load_pb2_grpc.LoadServiceStub(channel), sim.url)
        cp.kill()
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            assert listed(stub)[sim.url] == acked
            until(lambda: fresh(stub, sim.url))
        cp.restart()  # a graceful stop and start as well
        with grpc.insecure_channel(cp.target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            assert listed(stub)[sim.url] == acked
            until(lambda: fresh(stub, sim.url))


def test_a_deregistration_survives_kill_9_right_after_the_ack() -> None:
    """DeregisterWorker acknowledged, then SIGKILL: the worker does not come back after a restart."""
    with ControlPlaneProcess() as cp:
        with grpc.insecure_channel(cp.target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            for port in (5901, 5902):
                register(
                    stub,
                    f"http://127.0.0.1:{port}",
                    protocol=pb.WORKER_PROTOCOL_HTTP1,
                    models=("m",),
                    endpoints=(f"tcp://127.0.0.1:{port}",),
                )
            stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://127.0.0.1:5901"), timeout=10)
        cp.kill()
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            assert list(listed(load_pb2_grpc.LoadServiceStub(channel))) == ["http://127.0.0.1:5902"]


def test_discovery_pending_at_a_crash_goes_on_after_the_restart() -> None:
    """Registered before its engine answered, then the control plane crashed: after the restart the
    worker is still asked, and is discovered once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ControlPlaneProcess() as cp:
        with grpc.insecure_channel(cp.target) as channel:
            assert register(load_pb2_grpc.LoadServiceStub(channel), url).discovery_error
        cp.kill()
        cp.start()
        routes = {"/server_info": (200, server_info(7950, dp_size=2)), "/v1/models": (200, models("later"))}
        with grpc.insecure_channel(cp.target) as channel, FakeWorker(routes, port=port):
            stub = load_pb2_grpc.LoadServiceStub(channel)
            worker = until(lambda: (w := listed(stub)[url]).load_endpoints and w)
        assert list(worker.models) == ["later"] and worker.dp_size == 2


def test_a_stored_worker_that_todays_rules_refuse_can_be_removed_and_harms_nothing() -> None:
    """A row written by an older, laxer version (a host the resolver refuses) is listed, does not
    stop background discovery of the others, and `workers remove` with the listed URL removes it."""
    legacy = "http://h..x:9001"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ControlPlaneProcess() as cp:
        cp.stop()
        with sqlite3.connect(cp.store_path) as db:
            db.execute(
                "INSERT INTO workers VALUES (?, 1, 2, '[]', '[]', 'load', 1, 0, ?)",
                (legacy, "protocol AUTO assumed HTTP/1.1: GET http://h..x:9001/server_info: refused"),
            )
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            assert legacy in listed(stub)
            assert register(stub, url).discovery_error
            routes = {"/server_info": (200, server_info(7960)), "/v1/models": (200, models("m"))}
            with FakeWorker(routes, port=port):
                until(lambda: listed(stub)[url].load_endpoints)
            removed = fleetplane("workers", "remove", legacy, "--control-plane", cp.target)
            assert removed.returncode == 0, removed.stderr
            assert legacy not in listed(stub)
        assert not [line for line in cp.log_lines if "background_task_failed" in line]
        assert not [json.loads(line) for line in cp.log_lines if '"internal_error"' in line]
