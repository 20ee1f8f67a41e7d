"""SGLang 0.5.23's own load publisher feeding a real control plane: all eleven positions reach
GetLoads and WatchLoads, per rank and summed per worker (SPEC §6, §7)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import load_pb2, load_pb2_grpc
from dataplane.engine.publisher import LoadPublisher
from tests.fakes import sglang_engine as engine
from tests.fakes.engine_sim import free_port_range
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.sglang_engine.load_publisher import SNAPSHOT, publisher

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)
WORKER = "http://127.0.0.1:9001"
APPENDED = (
    "num_waiting_uncached_tokens",
    "num_total_tokens",
    "max_running_requests",
    "total_prefill_uncached_tokens",
    "total_prefill_busy_us",
)


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


async def _first_frames(stub: load_pb2_grpc.LoadServiceStub, send: object) -> load_pb2.WorkerLoad:
    deadline = time.monotonic() + 10
    while True:
        send()  # type: ignore[operator]
        loads = await stub.GetLoads(load_pb2.GetLoadsRequest())
        worker = next(w for w in loads.workers if w.url == WORKER)
        if worker.freshness == load_pb2.FRESHNESS_FRESH:
            return worker
        assert time.monotonic() < deadline, "no frame reached the control plane"
        await asyncio.sleep(0.05)


async def test_sglangs_publisher_reaches_getloads_and_watchloads_whole(tmp_path: Path) -> None:
    """Frames from SGLang's real SchedulerLoadPublisher: the appended counts are in GetLoads per rank
    and summed for the worker, and in a WatchLoads stream."""
    port = free_port_range(1)
    async with (
        running_control_plane(tmp_path, load_stale_after_s=2.0, load_push_interval_ms=20) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = load_pb2_grpc.LoadServiceStub(channel)
        with publisher(port) as sglang:
            await stub.RegisterWorker(
                load_pb2.RegisterWorkerRequest(
                    url=WORKER, models=["m"], load_endpoints=[f"tcp://127.0.0.1:{port}"]
                )
            )
            busy = iter(range(10**6))

            def send() -> None:
                # A new busy-time each call: a changed stat goes out at once (no heartbeat wait).
                snap = dataclasses.replace(
                    SNAPSHOT, total_prefill_busy_us=SNAPSHOT.total_prefill_busy_us + next(busy)
                )
                sglang.publish_load_stat(lambda: snap, force=True)

            worker = await _first_frames(stub, send)
            rank = worker.ranks[0]
            assert (rank.num_running_reqs, rank.num_waiting_reqs, rank.num_tokens) == (3, 2, 1500)
            assert (rank.num_waiting_uncached_tokens, rank.num_total_tokens, rank.max_running_requests) == (
                700,
                2200,
                256,
            )
            assert rank.total_prefill_uncached_tokens == 123456 and rank.total_prefill_busy_us >= 78901
            assert [worker.HasField(name) for name in APPENDED] == [True] * 5
            assert (worker.num_waiting_uncached_tokens, worker.max_running_requests) == (700, 256)
            page = await asyncio.to_thread(_page, f"http://{plane.http_address}/")
            # The status page's worker row: the running limit, the queued prefill tokens, the speed.
            assert "<td>256</td>" in page and "<td>700</td>" in page and "prefill tokens/s" in page
            call = stub.WatchLoads(load_pb2.WatchLoadsRequest(router_id="test"))
            first = await asyncio.wait_for(call.read(), 5)
            watched = next(w for w in first.workers if w.url == WORKER)
            assert (watched.num_total_tokens, watched.ranks[0].total_prefill_uncached_tokens) == (
                2200,
                123456,
            )
            call.cancel()


async def test_an_older_engines_six_positions_leave_the_appended_counts_unset(tmp_path: Path) -> None:
    """A six-position frame is valid: GetLoads has its counts and no appended field (unknown, not 0)."""
    port = free_port_range(1)
    async with (
        running_control_plane(tmp_path, load_stale_after_s=2.0, load_push_interval_ms=20) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = load_pb2_grpc.LoadServiceStub(channel)
        old = LoadPublisher.bind(f"tcp://127.0.0.1:{port}", attn_dp_rank=0)
        try:
            await stub.RegisterWorker(
                load_pb2.RegisterWorkerRequest(
                    url=WORKER, models=["m"], load_endpoints=[f"tcp://127.0.0.1:{port}"]
                )
            )
            counter = iter(range(10**6))
            worker = await _first_frames(
                stub, lambda: old.publish(lambda: (next(counter), 1, 2, 100), force=True)
            )
        finally:
            old.close()
    assert worker.num_waiting_reqs == 1 and worker.max_total_num_tokens == 100
    assert [worker.HasField(name) for name in APPENDED] == [False] * 5
    assert [worker.ranks[0].HasField(name) for name in APPENDED] == [False] * 5
