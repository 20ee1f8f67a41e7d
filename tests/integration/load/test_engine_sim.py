"""Discovery and ingest against a real engine-sim (dp 2, load publishing on auto ports)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from controlplane.v1 import load_pb2, load_pb2_grpc
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.load_peers import until_async


@pytest.mark.parametrize(("flags", "protocol"), [((), "HTTP1"), (("--http2",), "H2C")])
async def test_registered_engine_sim_is_discovered_and_turns_fresh(
    tmp_path: Path, flags: tuple[str, ...], protocol: str
) -> None:
    """AUTO registration reads /server_info + /v1/models, then both ranks' heartbeats make it FRESH."""
    kv = kv_endpoint_with_free_load_ports(2)
    async with (
        EngineSim(
            *flags, "--dp-size", "2", "--load-publish-endpoint", "auto", "--kv-events-endpoint", kv
        ) as sim,
        running_control_plane(tmp_path) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = load_pb2_grpc.LoadServiceStub(channel)
        worker = (await stub.RegisterWorker(load_pb2.RegisterWorkerRequest(url=sim.url))).worker
        assert load_pb2.WorkerProtocol.Name(worker.resolved_protocol) == f"WORKER_PROTOCOL_{protocol}"
        base = int(kv.rsplit(":", 1)[1]) + 2  # auto: KV port + dp_size (SPEC §7)
        assert list(worker.load_endpoints) == [f"tcp://{sim.host}:{base}", f"tcp://{sim.host}:{base + 1}"]
        assert (
            worker.discovered and worker.dp_size == 2 and list(worker.models) and worker.discovery_error == ""
        )

        async def fresh() -> bool:
            (load,) = (await stub.GetLoads(load_pb2.GetLoadsRequest())).workers
            return load.freshness == load_pb2.FRESHNESS_FRESH and all(r.frames_received for r in load.ranks)

        await until_async(fresh, timeout_s=10)
        (load,) = (await stub.GetLoads(load_pb2.GetLoadsRequest())).workers
        assert load.max_total_num_tokens > 0 and [r.dp_rank for r in load.ranks] == [0, 1]
