"""Where publishers bind (SPEC §7): IPv6, wildcard hosts, host names, late and restarted publishers."""

from __future__ import annotations

import errno
import socket
import time

import zmq

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.load_publishers import Publisher, deregister, fake_url, rank, register, until, view


def bind_when_free(sock: zmq.Socket[bytes], endpoint: str) -> None:
    """Bind, retrying while the port's previous socket is still being closed (libzmq closes asynchronously)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def free_port(host: str, family: int = socket.AF_INET) -> int:
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def test_ipv6_wildcard_endpoints_become_the_workers_ipv6_host(
    stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """An IPv6 worker URL with `tcp://*:P` and `tcp://[::]:P` endpoints subscribes to [::1]; frames flow."""
    url = fake_url("[::1]")
    # Rank 0 binds like an engine with IPv6 on and a wildcard host (dual stack), rank 1 on [::1] only.
    dual = zmq.Context.instance().socket(zmq.PUB)
    dual.setsockopt(zmq.LINGER, 0)
    dual.setsockopt(zmq.IPV6, 1)
    try:
        r0 = Publisher(dual, dual.bind_to_random_port("tcp://*"), dp_rank=0)
        r1 = Publisher(*pubs("::1"), dp_rank=1)
        worker = register(stub, url, [f"tcp://*:{r0.port}", f"tcp://[::]:{r1.port}"])
        assert list(worker.load_endpoints) == [f"tcp://[::1]:{r0.port}", f"tcp://[::1]:{r1.port}"]
        r0.join(lambda: rank(stub, url, 0).frames_received > 0, running=2)
        r1.join(lambda: rank(stub, url, 1).frames_received > 0, running=3)
        w = view(stub, url)
        assert w.freshness == pb.FRESHNESS_FRESH and w.num_running_reqs == 5
        deregister(stub, url)
    finally:
        dual.close(0)


def test_a_host_name_endpoint_is_resolved(stub: load_pb2_grpc.LoadServiceStub, pubs) -> None:  # type: ignore[no-untyped-def]
    """`tcp://localhost:P` (a name, not an address) reaches a publisher bound on 127.0.0.1."""
    url = fake_url("localhost")
    p = Publisher(*pubs())
    register(stub, url, [f"tcp://localhost:{p.port}"])
    p.join(lambda: rank(stub, url).num_running_reqs == 4, running=4)
    deregister(stub, url)


def test_an_ipv6_publisher_that_binds_late_then_restarts_is_followed(
    stub: load_pb2_grpc.LoadServiceStub,
) -> None:
    """Registered before the engine binds on [::1]; picked up once it does; a restart on the same port recovers."""
    url = fake_url("[::1]")
    port = free_port("::1", socket.AF_INET6)
    register(stub, url, [f"tcp://[::1]:{port}"])
    time.sleep(1.0)  # several failed connects by now
    assert view(stub, url).freshness == pb.FRESHNESS_UNKNOWN
    ctx = zmq.Context.instance()

    def bind() -> Publisher:
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IPV6, 1)
        bind_when_free(sock, f"tcp://[::1]:{port}")
        return Publisher(sock, port)

    first = bind()
    try:
        first.seq = 500
        first.join(lambda: rank(stub, url).seq >= 500, running=1)
    finally:
        first.sock.close(0)
    again = bind()  # seq counts from 0 again
    try:
        again.join(lambda: rank(stub, url).num_running_reqs == 9, running=9)
        r = rank(stub, url)
        assert r.publisher_restarts == 1 and r.dropped_frames == 0 and r.freshness == pb.FRESHNESS_FRESH
        assert r.seq < 500
    finally:
        again.sock.close(0)
    deregister(stub, url)


def test_frames_a_restarted_publisher_sent_before_the_reconnect_are_not_dropped(
    stub: load_pb2_grpc.LoadServiceStub, monitors
) -> None:  # type: ignore[no-untyped-def]
    """An engine restarts on its port: one restart; what it published before we reconnected was sent to nobody, not lost."""
    url = fake_url()
    port = free_port("127.0.0.1")
    register(stub, url, [f"tcp://127.0.0.1:{port}"])
    ctx = zmq.Context.instance()

    def bind() -> Publisher:
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        bind_when_free(sock, f"tcp://127.0.0.1:{port}")
        return Publisher(sock, port)

    first = bind()
    try:
        first.join(lambda: rank(stub, url).frames_received > 0)  # a young engine: a few frames
        old_seq = rank(stub, url).seq
    finally:
        first.sock.close(0)
    again = bind()
    seen = monitors(again.sock)
    try:
        until(lambda: seen.accepted >= 1)
        # Its counter started at 0 when it bound and ran past the old one's before we were
        # subscribed (a PUB without subscribers discards frames): the first we get is ahead.
        first_seen = old_seq + 5
        again.seq = first_seen
        again.join(lambda: rank(stub, url).seq >= first_seen, running=3)
        assert (rank(stub, url).dropped_frames, rank(stub, url).publisher_restarts) == (0, 1)
    finally:
        again.sock.close(0)
    deregister(stub, url)
