"""LoadService end to end in one process: a real control plane, real ZMQ publishers on loopback."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from controlplane.app import ControlPlane
from controlplane.load.wire import LoadStat
from controlplane.v1 import load_pb2, load_pb2_grpc
from dataplane.engine.publisher import LoadPublisher
from tests.fakes.engine_sim import free_port_range
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.load_peers import Pub, until, until_async

FRESH, STALE, UNKNOWN = load_pb2.FRESHNESS_FRESH, load_pb2.FRESHNESS_STALE, load_pb2.FRESHNESS_UNKNOWN
WORKER = "http://127.0.0.1:9001"
OTHER = "http://127.0.0.1:9002"


@dataclass
class Fleet:
    plane: ControlPlane
    stub: load_pb2_grpc.LoadServiceStub
    ctx: zmq.Context[zmq.Socket[bytes]]
    pubs: list[Pub] = field(default_factory=list)

    def pub(self) -> Pub:
        p = Pub(self.ctx)
        self.pubs.append(p)
        return p

    async def register(self, url: str, endpoints: list[str], **kw: object) -> load_pb2.Worker:
        request = load_pb2.RegisterWorkerRequest(
            url=url,
            protocol=kw.get("protocol", load_pb2.WORKER_PROTOCOL_HTTP1),  # type: ignore[arg-type]
            models=["m"],
            load_endpoints=endpoints,
        )
        return (await self.stub.RegisterWorker(request)).worker

    async def load(self, url: str = WORKER) -> load_pb2.WorkerLoad:
        loads = await self.stub.GetLoads(load_pb2.GetLoadsRequest())
        return next(w for w in loads.workers if w.url == url)


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    async with (
        running_control_plane(tmp_path, load_stale_after_s=0.5, load_push_interval_ms=20) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        yield Fleet(plane, load_pb2_grpc.LoadServiceStub(channel), ctx)
    ctx.destroy(linger=0)


class Watcher:
    """Collects a WatchLoads stream in the background, folding deltas into a current view."""

    def __init__(self, stub: load_pb2_grpc.LoadServiceStub) -> None:
        self.messages: list[load_pb2.WatchLoadsResponse] = []
        self.view: dict[str, load_pb2.WorkerLoad] = {}
        self._call = stub.WatchLoads(load_pb2.WatchLoadsRequest(router_id="test"))
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for msg in self._call:
            self.messages.append(msg)
            if msg.full:
                self.view = {}
            for w in msg.workers:
                self.view[w.url] = w
            for url in msg.removed_urls:
                self.view.pop(url, None)

    async def close(self) -> None:
        self._call.cancel()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def connected(pub: Pub, fleet: Fleet, url: str = WORKER) -> None:
    """Publish heartbeats until the control plane has seen one (ZMQ slow joiner)."""

    async def seen() -> bool:
        pub.send(LoadStat(0, 0, 0, 100, 0))
        return (await fleet.load(url)).ranks[0].frames_received > 0

    await until_async(seen)


async def test_engine_change_reaches_a_watcher(fleet: Fleet) -> None:
    """A stat published by a real engine-side LoadPublisher shows up in a WatchLoads stream."""
    port = free_port_range(1)
    publisher = LoadPublisher.bind(f"tcp://*:{port}", attn_dp_rank=0, context=fleet.ctx)
    try:
        worker = await fleet.register(WORKER, [f"tcp://*:{port}"])
        assert list(worker.load_endpoints) == [f"tcp://127.0.0.1:{port}"] and worker.dp_size == 1
        watcher = Watcher(fleet.stub)
        await until(lambda: bool(watcher.messages))
        first = watcher.messages[0]
        assert first.full and [w.url for w in first.workers] == [WORKER]
        assert first.workers[0].freshness == UNKNOWN

        def seen() -> bool:
            publisher.publish(lambda: (7, 3, 512, 4096), force=True)
            w = watcher.view.get(WORKER)
            return w is not None and w.num_running_reqs == 7

        deadline = time.monotonic() + 5
        while not seen():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        w = watcher.view[WORKER]
        assert (w.num_waiting_reqs, w.num_tokens, w.max_total_num_tokens, w.freshness) == (
            3,
            512,
            4096,
            FRESH,
        )
        assert not any(m.full for m in watcher.messages[1:])
        await watcher.close()
    finally:
        publisher.close()


async def test_silent_publisher_turns_stale_without_a_frame(fleet: Fleet) -> None:
    """A publisher that stops is pushed as STALE after --load-stale-after-s, with no new frame."""
    pub = fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    watcher = Watcher(fleet.stub)
    await connected(pub, fleet)
    await until(lambda: WORKER in watcher.view and watcher.view[WORKER].freshness == FRESH)
    pub.close()
    started = time.monotonic()
    await until(lambda: watcher.view[WORKER].freshness == STALE, timeout_s=3)
    assert time.monotonic() - started >= 0.3
    assert watcher.view[WORKER].ranks[0].freshness == STALE
    await watcher.close()


async def test_restarted_publisher_recovers_and_counts_a_restart(fleet: Fleet) -> None:
    """A publisher that comes back (seq from 0) is FRESH again and counted as one restart."""
    pub = fleet.pub()
    endpoint = pub.endpoint
    await fleet.register(WORKER, [endpoint])
    await connected(pub, fleet)
    for _ in range(5):
        pub.send(LoadStat(1, 0, 0, 100, 0))
    await until_async(lambda: _seq_at_least(fleet, 5))
    pub.close()
    await until_async(lambda: _freshness_is(fleet, STALE), timeout_s=3)
    again = Pub(fleet.ctx, endpoint.replace("127.0.0.1", "*"))
    fleet.pubs.append(again)

    async def back() -> bool:
        again.send(LoadStat(2, 0, 0, 100, 0), seq=0)
        w = await fleet.load()
        return w.freshness == FRESH and w.num_running_reqs == 2

    await until_async(back)
    rank = (await fleet.load()).ranks[0]
    assert rank.publisher_restarts == 1


async def _seq_at_least(fleet: Fleet, seq: int) -> bool:
    return (await fleet.load()).ranks[0].seq >= seq


async def _freshness_is(fleet: Fleet, freshness: int) -> bool:
    return (await fleet.load()).freshness == freshness


async def test_gaps_are_counted_as_dropped_frames(fleet: Fleet) -> None:
    """Sequence numbers that never arrived are reported as dropped frames of that rank."""
    pub = fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    await connected(pub, fleet)
    base = (await fleet.load()).ranks[0]
    pub.send(LoadStat(5, 0, 0, 100, 0), seq=pub.seq + 10)
    await until_async(lambda: _running_is(fleet, 5))
    rank = (await fleet.load()).ranks[0]
    assert rank.dropped_frames >= base.dropped_frames + 10


INT64_MAX = 2**63 - 1


async def test_a_sequence_that_would_overflow_the_dropped_count_breaks_no_load_view(fleet: Fleet) -> None:
    """seq 0, 2^63-1, 0, 2^63-1: dropped frames saturate at int64 max; GetLoads/WatchLoads keep serving all."""
    pub, other = fleet.pub(), fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    await fleet.register(OTHER, [other.endpoint])
    await connected(pub, fleet)
    await connected(other, fleet, OTHER)
    watcher = Watcher(fleet.stub)
    await until(lambda: OTHER in watcher.view)
    for seq in (0, INT64_MAX, 0, INT64_MAX):
        pub.send(LoadStat(3, 0, 0, 100, 0), seq=seq)
    await until_async(lambda: _restarts_at_least(fleet, 2))
    other.send(LoadStat(9, 0, 0, 100, 0))
    await until_async(lambda: _running_is(fleet, 9, OTHER))
    rank = (await fleet.load()).ranks[0]
    assert (rank.seq, rank.dropped_frames, rank.num_running_reqs) == (INT64_MAX, INT64_MAX, 3)
    await until(lambda: watcher.view[OTHER].num_running_reqs == 9)
    assert watcher.view[WORKER].ranks[0].dropped_frames == INT64_MAX
    await watcher.close()
    again = Watcher(fleet.stub)  # a new watcher's full view carries both workers too
    await until(lambda: {WORKER, OTHER} <= set(again.view))
    await again.close()


async def _restarts_at_least(fleet: Fleet, restarts: int) -> bool:
    return (await fleet.load()).ranks[0].publisher_restarts >= restarts


async def _running_is(fleet: Fleet, running: int, url: str = WORKER) -> bool:
    return (await fleet.load(url)).num_running_reqs == running


async def test_garbage_frames_are_counted_and_valid_frames_still_flow(fleet: Fleet) -> None:
    """Wrong frame count, bad msgpack, wrong tag, huge frames: counted per rank, nothing crashes."""
    pub = fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    await connected(pub, fleet)
    seq = (1_000_000).to_bytes(8, "big")
    garbage = [
        [b"load"],
        [b"load", seq],
        [b"load", seq, b"\xc1"],
        [b"load", seq, b"\x96\xa5Other\x01\x02\x03\x04\xc0"],
        [b"load", seq, b"\x91" + b"\x00" * 3_000_000],
        [b"load", seq, b"a", b"b", b"c"],
    ]
    for frames in garbage:
        pub.send_raw(frames)
    pub.send(LoadStat(11, 0, 0, 100, 0))
    await until_async(lambda: _running_is(fleet, 11))
    rank = (await fleet.load()).ranks[0]
    assert rank.malformed_frames == len(garbage)
    assert rank.freshness == FRESH
    metrics = await asyncio.to_thread(_get, f"http://{fleet.plane.http_address}/metrics")
    assert re.search(r'^fleetplane_load_frames_total\{outcome="malformed"\} [1-9]', metrics, re.M)
    assert re.search(r'^fleetplane_control_watchers\{stream="loads"\} ', metrics, re.M)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()  # type: ignore[no-any-return]


async def test_deregister_closes_sockets_and_is_pushed_as_removed(fleet: Fleet) -> None:
    """Deregistering disconnects the SUB from the publisher and tells watchers the URL is gone."""
    pub = fleet.pub()
    monitor = pub.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    await fleet.register(WORKER, [pub.endpoint])
    await connected(pub, fleet)
    watcher = Watcher(fleet.stub)
    await until(lambda: WORKER in watcher.view)
    await fleet.stub.DeregisterWorker(load_pb2.DeregisterWorkerRequest(url=WORKER))
    await until(lambda: any(WORKER in m.removed_urls for m in watcher.messages))
    assert WORKER not in watcher.view
    await until(lambda: bool(monitor.poll(0)))
    assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await fleet.stub.DeregisterWorker(load_pb2.DeregisterWorkerRequest(url=WORKER))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await fleet.stub.ListWorkers(load_pb2.ListWorkersRequest())).workers == []
    pub.sock.disable_monitor()
    monitor.close(linger=0)
    await watcher.close()


@pytest.mark.parametrize(
    ("url", "endpoints", "field"),
    [
        ("ftp://h:1", [], "url"),
        ("http://h:99999", [], "url"),
        ("http://127.0.0.1:9001", ["udp://h:1"], "load_endpoints[0]"),
        ("http://127.0.0.1:9001", ["tcp://h"], "load_endpoints[0]"),
    ],
)
async def test_invalid_registration_names_the_field(
    fleet: Fleet, url: str, endpoints: list[str], field: str
) -> None:
    """A bad URL or endpoint is INVALID_ARGUMENT with a message naming the field."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await fleet.register(url, endpoints)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(f"{field}: ")


async def test_two_ranks_are_summed_and_stale_until_both_report(fleet: Fleet) -> None:
    """A dp-2 worker sums both ranks and is FRESH only once both have reported."""
    p0, p1 = fleet.pub(), fleet.pub()
    await fleet.register(WORKER, [p0.endpoint, p1.endpoint])
    await connected(p0, fleet)
    assert (await fleet.load()).freshness == UNKNOWN

    async def both() -> bool:
        p0.send(LoadStat(1, 2, 10, 100, 0))
        p1.send(LoadStat(3, 4, 20, 100, 1))
        w = await fleet.load()
        return w.freshness == FRESH and w.num_running_reqs == 4

    await until_async(both)
    w = await fleet.load()
    assert (w.num_waiting_reqs, w.num_tokens, w.max_total_num_tokens) == (6, 30, 200)
    assert [r.dp_rank for r in w.ranks] == [0, 1]
    page = await asyncio.to_thread(_get, f"http://{fleet.plane.http_address}/")
    assert "Worker load" in page and WORKER in page and "FRESH" in page and "(30/200)" in page


async def test_registry_survives_a_restart(tmp_path: Path) -> None:
    """Workers registered before a restart are listed and subscribed again after it."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = Pub(ctx)
    try:
        async with (
            running_control_plane(tmp_path) as plane,
            grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
        ):
            stub = load_pb2_grpc.LoadServiceStub(channel)
            await stub.RegisterWorker(
                load_pb2.RegisterWorkerRequest(
                    url=WORKER,
                    protocol=load_pb2.WORKER_PROTOCOL_H2C,
                    models=["m"],
                    load_endpoints=[pub.endpoint],
                )
            )
        async with (
            running_control_plane(tmp_path) as plane,
            grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
        ):
            fleet = Fleet(plane, load_pb2_grpc.LoadServiceStub(channel), ctx)
            (worker,) = (await fleet.stub.ListWorkers(load_pb2.ListWorkersRequest())).workers
            assert (worker.url, worker.resolved_protocol) == (WORKER, load_pb2.WORKER_PROTOCOL_H2C)
            assert list(worker.load_endpoints) == [pub.endpoint] and list(worker.models) == ["m"]
            await connected(pub, fleet)
    finally:
        pub.close()
        ctx.destroy(linger=0)


async def test_roles_viewer_and_router_read_only_admin_registers(tmp_path: Path) -> None:
    """RegisterWorker/DeregisterWorker need admin; routers and viewers may list, get and watch."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        '{"ops": {"token": "t-admin", "role": "admin"}, "r": {"token": "t-router", "role": "router"},'
        ' "v": {"token": "t-viewer", "role": "viewer"}}'
    )
    async with (
        running_control_plane(tmp_path, auth_tokens=str(tokens)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = load_pb2_grpc.LoadServiceStub(channel)

        def auth(token: str) -> tuple[tuple[str, str], ...]:
            return (("authorization", f"Bearer {token}"),)

        register = load_pb2.RegisterWorkerRequest(
            url=WORKER,
            protocol=load_pb2.WORKER_PROTOCOL_HTTP1,
            models=["m"],
            load_endpoints=["tcp://127.0.0.1:9"],
        )
        for token in ("t-router", "t-viewer"):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.RegisterWorker(register, metadata=auth(token))
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await stub.RegisterWorker(register, metadata=auth("t-admin"))
        for token in ("t-router", "t-viewer"):
            assert (
                len((await stub.ListWorkers(load_pb2.ListWorkersRequest(), metadata=auth(token))).workers)
                == 1
            )
            assert len((await stub.GetLoads(load_pb2.GetLoadsRequest(), metadata=auth(token))).workers) == 1
            call = stub.WatchLoads(load_pb2.WatchLoadsRequest(router_id="r"), metadata=auth(token))
            first = await call.read()
            call.cancel()
            assert first.full and [w.url for w in first.workers] == [WORKER]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.DeregisterWorker(
                    load_pb2.DeregisterWorkerRequest(url=WORKER), metadata=auth(token)
                )
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetLoads(load_pb2.GetLoadsRequest())
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_registration_answers_within_the_callers_deadline(fleet: Fleet) -> None:
    """A worker that accepts but never answers cannot make RegisterWorker outlive its deadline."""
    held: list[asyncio.StreamWriter] = []

    async def hang(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        response = await fleet.stub.RegisterWorker(
            load_pb2.RegisterWorkerRequest(
                url=f"http://127.0.0.1:{port}", load_endpoints=["tcp://127.0.0.1:9"]
            ),
            timeout=1.5,
        )
        assert time.monotonic() - started < 1.5
        worker = response.worker
        assert worker.resolved_protocol == load_pb2.WORKER_PROTOCOL_HTTP1
        assert "protocol AUTO assumed HTTP/1.1" in worker.discovery_error
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_watch_messages_are_coalesced_to_the_push_interval(fleet: Fleet) -> None:
    """Under a stream of changes a watcher gets about one message per push interval, never more."""
    pub = fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    await connected(pub, fleet)
    watcher = Watcher(fleet.stub)
    await until(lambda: bool(watcher.messages))
    started = len(watcher.messages)
    deadline = time.monotonic() + 1.0
    n = 0
    while time.monotonic() < deadline:
        n += 1
        pub.send(LoadStat(n, 0, 0, 100, 0))
        await asyncio.sleep(0.002)
    await until(lambda: watcher.view[WORKER].num_running_reqs == n)
    deltas = watcher.messages[started:]
    await watcher.close()
    stamps = [m.time.ToNanoseconds() / 1e9 for m in deltas]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert 10 <= len(deltas) <= 1.0 / 0.020 + 3, len(deltas)  # interval 20 ms; ~n frames sent
    assert min(gaps) >= 0.015, min(gaps)


async def test_watchers_in_step_get_the_same_message_for_each_push(fleet: Fleet) -> None:
    """Routers in step receive one shared message per push: same time stamp, same bytes."""
    pub = fleet.pub()
    await fleet.register(WORKER, [pub.endpoint])
    await connected(pub, fleet)
    watchers = [Watcher(fleet.stub), Watcher(fleet.stub)]
    await until(lambda: all(w.messages for w in watchers))
    for n in range(1, 26):
        pub.send(LoadStat(n, 0, 0, 100, 0))
        await asyncio.sleep(0.02)
    await until(lambda: all(w.view[WORKER].num_running_reqs == 25 for w in watchers))
    for w in watchers:
        await w.close()
    first, second = ({m.time.ToNanoseconds(): m for m in w.messages[1:]} for w in watchers)
    shared = first.keys() & second.keys()
    assert shared, "no push reached both watchers as one message"
    assert all(first[t].SerializeToString() == second[t].SerializeToString() for t in shared)


async def test_an_unreachable_publisher_says_why_until_it_is_up(fleet: Fleet) -> None:
    """A rank nobody publishes on shows "connection refused"; once a publisher binds there it clears."""
    port = free_port_range(1)
    await fleet.register(WORKER, [f"tcp://127.0.0.1:{port}"])

    async def reason() -> str:
        return (await fleet.load()).ranks[0].connect_error

    async def refused() -> bool:
        return await reason() == "connection refused"

    await until_async(refused)
    pub = Pub(fleet.ctx, f"tcp://127.0.0.1:{port}")
    fleet.pubs.append(pub)
    await connected(pub, fleet)
    assert await reason() == ""
