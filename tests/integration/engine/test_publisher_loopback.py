"""A real ZMQ PUB -> SUB exchange of load frames on loopback (SPEC §7)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import msgspec
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from dataplane.engine.endpoints import LoadPubRange
from dataplane.engine.publisher import LOAD_PUB_HWM, LoadPublisher, create_load_publisher
from tests.fakes.engine_sim import free_port_range

_raw = msgspec.msgpack.Decoder()


def own_decode(frames: list[bytes]) -> tuple[int, list[object]]:
    """Decode independently of controlplane.load.wire: topic, 8-byte BE seq, msgpack array."""
    topic, seq, payload = frames
    assert topic == b"load" and len(seq) == 8
    return int.from_bytes(seq, "big", signed=True), _raw.decode(payload)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def connect_sub(ctx: zmq.Context[zmq.Socket[bytes]], pub: LoadPublisher, port: int) -> zmq.Socket[bytes]:
    """A SUB connected to the publisher, returned once the subscription has had time to arrive."""
    assert pub._socket is not None
    monitor = pub._socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)  # type: ignore[attr-defined]
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"load")
    sub.connect(f"tcp://127.0.0.1:{port}")
    assert monitor.poll(5000), "publisher never saw the subscriber connect"
    recv_monitor_message(monitor)
    pub._socket.disable_monitor()  # type: ignore[attr-defined]
    monitor.close(linger=0)
    time.sleep(0.2)  # the SUBSCRIBE message follows the handshake
    return sub


def recv(sub: zmq.Socket[bytes], timeout_ms: int = 3000) -> tuple[int, list[object]]:
    assert sub.poll(timeout_ms), "no load frame arrived"
    return own_decode(sub.recv_multipart())


def test_subscriber_sees_sequence_from_zero(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A subscriber on loopback receives seq 0, 1, 2 with the published stats and rank."""
    port = free_port_range(1)
    pub = create_load_publisher(LoadPubRange("*", port, 1), dp_rank=0, context=ctx)
    try:
        assert pub.enabled and pub._socket is not None
        assert pub._socket.getsockopt(zmq.SNDHWM) == LOAD_PUB_HWM
        assert pub._socket.getsockopt(zmq.LINGER) == 0
        sub = connect_sub(ctx, pub, port)
        for running in range(3):
            assert pub.publish(lambda running=running: (running, 1, 10, 100), force=True)
        got = [recv(sub) for _ in range(3)]
        assert got == [(i, ["LoadStat", i, 1, 10, 100, 0]) for i in range(3)]
    finally:
        pub.close()


def test_idle_publisher_heartbeats_once_per_second(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """An unchanged stat published from a 10 ms idle loop reaches the subscriber about once a second."""
    port = free_port_range(1)
    pub = LoadPublisher.bind(f"tcp://*:{port}", attn_dp_rank=None, context=ctx)
    try:
        sub = connect_sub(ctx, pub, port)
        arrivals: list[tuple[float, int]] = []
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            pub.publish(lambda: (0, 0, 0, 4096))
            while sub.poll(0):
                seq, body = own_decode(sub.recv_multipart())
                assert body == ["LoadStat", 0, 0, 0, 4096, None]
                arrivals.append((time.monotonic(), seq))
            time.sleep(0.01)
        assert [seq for _, seq in arrivals] == [0, 1, 2]
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
        assert all(0.9 <= g <= 1.4 for g in gaps), gaps
    finally:
        pub.close()


def test_bind_conflict_raises_at_startup(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A port already taken is a bind error the engine can report at startup."""
    port = free_port_range(1)
    first = LoadPublisher.bind(f"tcp://*:{port}", attn_dp_rank=0, context=ctx)
    try:
        with pytest.raises(OSError, match="cannot bind load publisher"):
            LoadPublisher.bind(f"tcp://*:{port}", attn_dp_rank=0, context=ctx)
    finally:
        first.close()


def test_ipv6_wildcard_endpoint_accepts_ipv6_subscribers(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A [::] publisher enables IPv6 on its socket, so a subscriber on ::1 receives frames."""
    port = free_port_range(1)
    try:
        pub = LoadPublisher.bind(f"tcp://[::]:{port}", attn_dp_rank=0, context=ctx)
    except OSError as exc:
        pytest.skip(f"no IPv6 on this host: {exc}")
    try:
        assert pub._socket is not None and pub._socket.getsockopt(zmq.IPV6) == 1
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.IPV6, 1)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"load")
        sub.connect(f"tcp://[::1]:{port}")
        deadline = time.monotonic() + 3
        n = 0
        while time.monotonic() < deadline and not sub.poll(10):
            n += 1
            pub.publish(lambda n=n: (n, 0, 0, 0), force=True)
        assert sub.poll(0), "no frame over IPv6"
        assert own_decode(sub.recv_multipart())[1][0] == "LoadStat"
    finally:
        pub.close()
