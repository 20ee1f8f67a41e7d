"""Workers and engine load reach the router through the control plane (SPEC §6 WatchLoads, §7)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import zmq
import zmq.asyncio

from controlplane.load.wire import LoadStat, encode_frame
from controlplane.v1 import load_pb2, load_pb2_grpc
from dataplane.router.control.client import subscription
from dataplane.router.control.convert import ControlClientSettings
from dataplane.router.fleet.workers import WorkerSpec
from tests.fakes.control_targets import FakeRouter
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.polling import eventually


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def publishing(endpoint: str, running: int, waiting: int) -> AsyncIterator[None]:
    """A scheduler's load publisher: one frame every 100 ms while the block runs."""
    context = zmq.asyncio.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(endpoint)

    async def loop() -> None:
        for seq in range(10_000):
            await pub.send_multipart(encode_frame(seq, LoadStat(running, waiting, 10, 100, 0)))
            await asyncio.sleep(0.1)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        pub.close()
        context.term()


async def test_registered_worker_and_its_fresh_load_reach_the_router(tmp_path: Path) -> None:
    """A registered worker becomes part of the router's set; its published load arrives FRESH,
    and turns not-fresh once the engine stops publishing."""
    router = FakeRouter()
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    async with running_control_plane(tmp_path, load_stale_after_s=0.5, load_push_interval_ms=20) as plane:
        target = str(plane.grpc_address)
        async with grpc.aio.insecure_channel(target) as channel:
            await load_pb2_grpc.LoadServiceStub(channel).RegisterWorker(
                load_pb2.RegisterWorkerRequest(
                    url="http://127.0.0.1:9",
                    protocol=load_pb2.WORKER_PROTOCOL_H2C,
                    models=["m"],
                    load_endpoints=[endpoint],
                )
            )
        settings = ControlClientSettings(target=target, router_id="r", workers_poll_s=0.2)
        async with subscription(settings, router):
            async with publishing(endpoint, running=3, waiting=2):

                async def fresh() -> bool:
                    view = router.loads.get("http://127.0.0.1:9")
                    return view is not None and (view.running, view.waiting, view.fresh) == (3, 2, True)

                await eventually(fresh, timeout_s=5)
                assert router.workers[-1] == (WorkerSpec("http://127.0.0.1:9", "h2c", ("m",)),)

            async def stale() -> bool:
                view = router.loads.get("http://127.0.0.1:9")
                return view is not None and not view.fresh

            await eventually(stale, timeout_s=5)


class _BigFleetLoads(load_pb2_grpc.LoadServiceServicer):
    """A LoadService whose full view is larger than gRPC's default 4 MB receive limit."""

    def __init__(self, workers: int) -> None:
        view = load_pb2.WatchLoadsResponse(full=True)
        for i in range(workers):
            w = view.workers.add(
                url=f"http://10.{i >> 16}.{(i >> 8) & 255}.{i & 255}:30000",
                num_running_reqs=1,
                freshness=load_pb2.FRESHNESS_FRESH,
            )
            w.ranks.add(dp_rank=0, endpoint=f"tcp://10.{i >> 16}.{(i >> 8) & 255}.{i & 255}:5557", seq=7)
        self.view = view

    async def WatchLoads(
        self, request: load_pb2.WatchLoadsRequest, context: object
    ) -> AsyncIterator[load_pb2.WatchLoadsResponse]:  # type: ignore[override]
        yield self.view
        await asyncio.Event().wait()

    async def ListWorkers(
        self, request: load_pb2.ListWorkersRequest, context: object
    ) -> load_pb2.ListWorkersResponse:  # type: ignore[override]
        return load_pb2.ListWorkersResponse()


async def test_a_full_view_beyond_grpcs_default_4_mb_reaches_the_router() -> None:
    """A fleet whose WatchLoads view is over 4 MB (80 000 workers) still reaches the router."""
    servicer = _BigFleetLoads(80_000)
    assert servicer.view.ByteSize() > 4 * 1024 * 1024
    server = grpc.aio.server()
    load_pb2_grpc.add_LoadServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        router = FakeRouter()
        settings = ControlClientSettings(target=f"127.0.0.1:{port}", router_id="r", workers_poll_s=5)
        async with subscription(settings, router):

            async def arrived() -> bool:
                return len(router.loads) == 80_000

            await eventually(arrived, timeout_s=20)
    finally:
        await server.stop(None)
