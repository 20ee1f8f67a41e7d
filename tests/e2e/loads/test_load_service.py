"""LoadService as a black box (SPEC §6, §7): our own PUB sockets, good and bad frames, the views."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import grpc
import msgspec
import pytest
import zmq

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.load_publishers import publish_until, until, view

URL = "http://127.0.0.1:9"  # nothing listens: endpoints and models are explicit, protocol HTTP1


STALE_AFTER_S = 1.0


def frame(seq: int, *stat: object) -> list[bytes]:
    """A load frame as SGLang publishes it: topic, 8-byte big-endian seq, msgpack array."""
    return [b"load", seq.to_bytes(8, "big", signed=True), msgspec.msgpack.encode(["LoadStat", *stat])]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlaneProcess]:
    with ControlPlaneProcess(
        "--load-stale-after-s", str(STALE_AFTER_S), "--load-push-interval-ms", "20"
    ) as cp:
        yield cp


@pytest.fixture
def stub(plane: ControlPlaneProcess) -> Iterator[load_pb2_grpc.LoadServiceStub]:
    with grpc.insecure_channel(plane.target) as channel:
        yield load_pb2_grpc.LoadServiceStub(channel)


def register(stub: load_pb2_grpc.LoadServiceStub, url: str, endpoints: list[str]) -> pb.Worker:
    request = pb.RegisterWorkerRequest(
        url=url, protocol=pb.WORKER_PROTOCOL_HTTP1, models=["audit-model"], load_endpoints=endpoints
    )
    return stub.RegisterWorker(request, timeout=30).worker


def test_frames_are_summed_over_ranks_and_accounted_per_rank(stub, pubs) -> None:  # type: ignore[no-untyped-def]
    """Two ranks (one as a wildcard endpoint): sums, seq, gaps as dropped, backwards as a restart."""
    rank0, port0 = pubs()
    rank1, port1 = pubs()
    worker = register(stub, URL, [f"tcp://127.0.0.1:{port0}", f"tcp://*:{port1}"])
    assert list(worker.load_endpoints) == [f"tcp://127.0.0.1:{port0}", f"tcp://127.0.0.1:{port1}"]
    assert worker.dp_size == 2 and worker.resolved_protocol == pb.WORKER_PROTOCOL_HTTP1
    assert view(stub, URL).freshness == pb.FRESHNESS_UNKNOWN
    seqs = iter(range(10_000))
    publish_until(
        rank0, lambda: frame(next(seqs), 3, 1, 100, 1000, 0), lambda: view(stub, URL).ranks[0].seq >= 0
    )
    publish_until(rank1, lambda: frame(5, 2, 0, 50, 2000, None), lambda: view(stub, URL).ranks[1].seq == 5)
    w = view(stub, URL)
    assert w.freshness == pb.FRESHNESS_FRESH
    assert (w.num_running_reqs, w.num_waiting_reqs, w.num_tokens, w.max_total_num_tokens) == (5, 1, 150, 3000)
    assert [r.dp_rank for r in w.ranks] == [0, 1]
    last = w.ranks[0].seq
    rank0.send_multipart(frame(last + 11, 4, 0, 10, 1000, 0))  # ten frames lost
    until(lambda: view(stub, URL).ranks[0].seq == last + 11)
    assert view(stub, URL).ranks[0].dropped_frames == 10
    rank0.send_multipart(frame(0, 1, 0, 10, 1000, 0))  # the publisher restarted
    until(lambda: view(stub, URL).ranks[0].seq == 0)
    r0 = view(stub, URL).ranks[0]
    assert (r0.publisher_restarts, r0.dropped_frames, r0.num_running_reqs) == (1, 10, 1)
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=URL), timeout=10)


BAD_FRAMES = [
    [b"load", b"\x00\x00\x00\x01", msgspec.msgpack.encode(["LoadStat", 9, 9, 9, 9, None])],  # short seq
    [b"load", (1).to_bytes(8, "big")],  # two parts
    [b"load", (1).to_bytes(8, "big"), b"\xc1"],  # not msgpack
    [b"load", (1).to_bytes(8, "big"), msgspec.msgpack.encode(["KvEvents", 9, 9, 9, 9, None])],  # wrong tag
    [b"load", (1).to_bytes(8, "big"), msgspec.msgpack.encode(["LoadStat", -9, 9, 9, 9, None])],  # negative
    [b"load", (1).to_bytes(8, "big"), msgspec.msgpack.encode(["LoadStat", "9", 9, 9, 9, None])],  # string
    [b"load", (1).to_bytes(8, "big"), msgspec.msgpack.encode({"num_running_reqs": 9})],  # a map
    [b"load", (-1).to_bytes(8, "big", signed=True), msgspec.msgpack.encode(["LoadStat", 9, 9, 9, 9, None])],
]


def test_malformed_frames_are_counted_and_dropped(stub, pubs) -> None:  # type: ignore[no-untyped-def]
    """Every malformed frame counts as malformed and changes nothing; extra trailing elements are fine."""
    url = "http://127.0.0.1:10"
    sock, port = pubs()
    register(stub, url, [f"tcp://127.0.0.1:{port}"])
    publish_until(sock, lambda: frame(0, 1, 2, 3, 4, 0), lambda: view(stub, url).ranks[0].frames_received > 0)
    before = view(stub, url).ranks[0]
    for bad in BAD_FRAMES:
        sock.send_multipart(bad)
    sock.send_multipart(frame(before.seq + 1, 7, 0, 30, 40, 0, "a later field"))
    until(lambda: view(stub, url).ranks[0].seq == before.seq + 1)
    after = view(stub, url).ranks[0]
    assert after.malformed_frames - before.malformed_frames == len(BAD_FRAMES)
    assert (after.num_running_reqs, after.num_tokens, after.max_total_num_tokens) == (7, 30, 40)
    assert after.dropped_frames == 0 and after.publisher_restarts == 0
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def test_watch_loads_full_then_deltas_stale_without_frames_and_removal(stub, pubs) -> None:  # type: ignore[no-untyped-def]
    """WatchLoads: a full first message, deltas after; STALE is pushed with no frame; removal is pushed."""
    url = "http://[::1]:11"
    sock, port = pubs("::1")
    register(stub, url, [f"tcp://[::1]:{port}"])
    messages: list[pb.WatchLoadsResponse] = []
    call = stub.WatchLoads(pb.WatchLoadsRequest(router_id="audit"))

    def pump() -> None:
        with contextlib.suppress(grpc.RpcError):
            for message in call:
                messages.append(message)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        until(lambda: len(messages) >= 1)
        assert messages[0].full and url in [w.url for w in messages[0].workers]
        seqs = iter(range(10_000))
        publish_until(
            sock,
            lambda: frame(next(seqs), 2, 0, 5, 10, 0),
            lambda: view(stub, url).freshness == pb.FRESHNESS_FRESH,
        )
        until(
            lambda: any(
                w.freshness == pb.FRESHNESS_FRESH for m in messages for w in m.workers if w.url == url
            )
        )
        silent_at = time.monotonic()
        until(
            lambda: any(
                w.freshness == pb.FRESHNESS_STALE for m in messages for w in m.workers if w.url == url
            )
        )
        assert time.monotonic() - silent_at < STALE_AFTER_S + 2
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
        until(lambda: any(url in m.removed_urls for m in messages))
        assert not any(m.full for m in messages[1:])
        assert url not in [w.url for w in stub.GetLoads(pb.GetLoadsRequest(), timeout=10).workers]
    finally:
        call.cancel()
        reader.join(5)


def test_a_restarted_publisher_on_the_same_port_is_followed(stub, pubs) -> None:  # type: ignore[no-untyped-def]
    """The engine restarts (its PUB socket closes and binds again): frames flow again, counted as a restart."""
    url = "http://127.0.0.1:12"
    ctx = zmq.Context.instance()
    first, port = pubs()
    register(stub, url, [f"tcp://127.0.0.1:{port}"])
    seqs = iter(range(100, 10_000))
    publish_until(
        first, lambda: frame(next(seqs), 5, 0, 1, 2, 0), lambda: view(stub, url).ranks[0].seq >= 100
    )
    first.close(0)
    again = ctx.socket(zmq.PUB)
    again.setsockopt(zmq.LINGER, 0)
    try:
        deadline = time.monotonic() + 5
        while True:  # libzmq releases the port asynchronously after close
            try:
                again.bind(f"tcp://127.0.0.1:{port}")
                break
            except zmq.ZMQError:
                assert time.monotonic() < deadline, "the port was not released"
                time.sleep(0.02)
        fresh = iter(range(10_000))
        publish_until(
            again,
            lambda: frame(next(fresh), 1, 0, 1, 2, 0),
            lambda: view(stub, url).ranks[0].num_running_reqs == 1,
        )
        rank = view(stub, url).ranks[0]
        assert rank.freshness == pb.FRESHNESS_FRESH and rank.publisher_restarts == 1
    finally:
        again.close(0)
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def test_registered_workers_survive_sigkill_and_are_subscribed_again(pubs) -> None:  # type: ignore[no-untyped-def]
    """After kill -9 and a restart the registry is intact and the worker's frames show again."""
    sock, port = pubs()
    with ControlPlaneProcess() as cp:
        with grpc.insecure_channel(cp.target) as channel:
            register(load_pb2_grpc.LoadServiceStub(channel), URL, [f"tcp://127.0.0.1:{port}"])
        cp.kill()
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            (worker,) = stub.ListWorkers(pb.ListWorkersRequest(), timeout=10).workers
            assert (worker.url, list(worker.models), list(worker.load_endpoints)) == (
                URL,
                ["audit-model"],
                [f"tcp://127.0.0.1:{port}"],
            )
            seqs = iter(range(10_000))
            publish_until(
                sock, lambda: frame(next(seqs), 6, 0, 1, 2, 0), lambda: view(stub, URL).num_running_reqs == 6
            )


def test_a_publisher_that_binds_after_registration_is_picked_up(stub) -> None:  # type: ignore[no-untyped-def]
    """Registered before its engine publishes (the usual order at boot): frames show once it binds."""
    url = "http://127.0.0.1:13"
    with socket.socket() as probe:  # a port nobody listens on yet
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    register(stub, url, [f"tcp://127.0.0.1:{port}"])
    time.sleep(1.5)  # the subscriber has failed to connect a few times by now
    ctx = zmq.Context.instance()
    late = ctx.socket(zmq.PUB)
    late.setsockopt(zmq.LINGER, 0)
    try:
        late.bind(f"tcp://127.0.0.1:{port}")
        started = time.monotonic()
        seqs = iter(range(10_000))
        publish_until(
            late, lambda: frame(next(seqs), 8, 0, 1, 2, 0), lambda: view(stub, url).num_running_reqs == 8
        )
        assert time.monotonic() - started < 5
    finally:
        late.close(0)
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
