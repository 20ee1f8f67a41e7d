"""The publisher an engine embeds, read by our own SUB socket and decoder (SPEC §7, reference C.1).

SGLang's ``publish_load_stat`` counts the call first (at most every 5th call reads the stat
unless forced), then sends when the stat changed or a second passed since the last send. So
"a changed stat goes out at once" means: on the next call the throttle lets through, without
waiting for the heartbeat; these tests check exactly that reading.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import structlog
import zmq

from dataplane.engine.endpoints import resolve_load_pub_range
from dataplane.engine.publisher import LoadPublisher, create_load_publisher
from tests.fakes.load_reader import LoadReader
from tests.fakes.sim_process import free_ports, port_free, until

Counts = tuple[int, int, int, int]


class Clock:
    """The publisher's injected clock (its ``clock=`` parameter)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingContext:
    """A real zmq context that remembers the sockets it made, so their options can be read."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.ctx = ctx
        self.made: list[zmq.Socket[bytes]] = []

    def socket(self, kind: int) -> zmq.Socket[bytes]:
        sock = self.ctx.socket(kind)
        self.made.append(sock)
        return sock


def joined(pub: LoadPublisher, reader: LoadReader, clock: Clock) -> None:
    """Publish (forced heartbeats) until the SUB has seen a frame: a late joiner loses the first ones."""

    def seen() -> bool:
        clock.now += 1.0  # an unchanged stat goes out again only once a second has passed
        assert pub.publish(lambda: (0, 0, 0, 0), force=True)
        reader.pump(0.02)
        return bool(reader.frames[0])

    assert reader.wait(seen, 10.0), "subscriber never received a frame"


def expect(reader: LoadReader, count: int, timeout_s: float = 5.0) -> list[Any]:
    """Wait for exactly ``count`` frames in total (a short quiet period proves no extra one)."""
    assert reader.wait(lambda: len(reader.frames[0]) >= count, timeout_s), reader.frames[0]
    reader.pump(0.1)
    assert len(reader.frames[0]) == count, [f.stat for f in reader.frames[0]]
    return [f.stat for f in reader.frames[0]]


@pytest.fixture
def pub_and_reader(
    ctx: zmq.Context[zmq.Socket[bytes]], readers: Callable[[list[str]], LoadReader]
) -> tuple[LoadPublisher, LoadReader, Clock]:
    port = free_ports(1)
    clock = Clock()
    pub = LoadPublisher.bind(f"tcp://127.0.0.1:{port}", attn_dp_rank=3, clock=clock, context=ctx)
    reader = readers([f"tcp://127.0.0.1:{port}"])
    joined(pub, reader, clock)
    reader.frames[0].clear()
    return pub, reader, clock


def test_frame_bytes_are_exactly_spec_7(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """The frames on the wire are b"load", seq as 8 bytes BE from 0, and the msgpack array."""
    port = free_ports(1)
    pub = LoadPublisher.bind(f"tcp://127.0.0.1:{port}", attn_dp_rank=None, clock=Clock(), context=ctx)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    try:
        got: list[list[bytes]] = []
        # Distinct stats, forced: every call is a frame. Keep going until the SUB has joined.
        deadline = time.monotonic() + 10
        n = 0
        while not got and time.monotonic() < deadline:
            pub.publish(lambda n=n: (1, 2, 3, 4 + n), force=True)
            n += 1
            if sub.poll(20):
                got.append(sub.recv_multipart())
        assert got, "no frame"
        first = got[0]
        seq = int.from_bytes(first[1], "big", signed=True)
        assert first[0] == b"load" and len(first) == 3 and len(first[1]) == 8
        # The golden bytes of the reference (C.1): 96 a8 "LoadStat" 01 02 03 04 c0 (nil rank).
        assert first[2] == bytes.fromhex("96a84c6f616453746174010203") + bytes([4 + seq]) + b"\xc0"
        assert first[1] == seq.to_bytes(8, "big", signed=True)
        # Every later frame has the next seq.
        pub.publish(lambda: (9, 9, 9, 9), force=True)
        assert sub.poll(5000)
        nxt = sub.recv_multipart()
        assert int.from_bytes(nxt[1], "big", signed=True) == n
        assert msgspec.msgpack.decode(nxt[2]) == ["LoadStat", 9, 9, 9, 9, None]
    finally:
        sub.close(linger=0)
        pub.close()


def test_seq_counts_from_zero_one_per_frame(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """The first frame a publisher ever sends is seq 0; each published frame adds exactly 1."""
    port = free_ports(1)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"load")
    sub.connect(f"tcp://127.0.0.1:{port}")
    clock = Clock()
    # The subscriber is connected before the publisher binds: ZMQ reconnects and the
    # subscription reaches the PUB before we publish (checked with the first frame below).
    pub = LoadPublisher.bind(f"tcp://127.0.0.1:{port}", attn_dp_rank=0, clock=clock, context=ctx)
    try:
        time.sleep(0)  # no fixed wait: frames are re-sent below until the first is seen
        seqs: list[int] = []
        stats: list[list[Any]] = []
        value = 0
        deadline = time.monotonic() + 10
        while len(seqs) < 12 and time.monotonic() < deadline:
            # 5 calls per change: the 5th goes through the throttle and carries the new stat.
            sent = [pub.publish(lambda value=value: (value, 0, 0, 100)) for _ in range(5)]
            assert sent == [False, False, False, False, True]
            value += 1
            while sub.poll(20):
                parts = sub.recv_multipart()
                seqs.append(int.from_bytes(parts[1], "big", signed=True))
                stats.append(msgspec.msgpack.decode(parts[2]))
        assert seqs, "no frame"
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        # A frame's seq equals the number of frames sent before it: stat value k went out as seq k.
        assert [s[1] for s in stats] == seqs
    finally:
        sub.close(linger=0)
        pub.close()


def test_unforced_calls_publish_at_most_every_fifth(pub_and_reader: Any) -> None:
    """Unforced: the stat is read and sent on calls 5, 10, 15, 20 only, even when it always changes."""
    pub, reader, _clock = pub_and_reader
    reads = 0

    def provider() -> Counts:
        nonlocal reads
        reads += 1
        return (reads, 0, 0, 10)

    sent = [pub.publish(provider) for _ in range(20)]
    assert [i + 1 for i, s in enumerate(sent) if s] == [5, 10, 15, 20]
    assert reads == 4
    assert [s[1] for s in expect(reader, 4)] == [1, 2, 3, 4]


def test_forced_call_goes_out_at_once(pub_and_reader: Any) -> None:
    """A forced call publishes a changed stat immediately, whatever the throttle count."""
    pub, reader, _clock = pub_and_reader
    pub.publish(lambda: (0, 0, 0, 0))  # one throttled call
    assert pub.publish(lambda: (7, 1, 70, 100), force=True)
    assert expect(reader, 1) == [["LoadStat", 7, 1, 70, 100, 3]]


def test_changed_stat_does_not_wait_for_the_heartbeat(pub_and_reader: Any) -> None:
    """A change goes out on the next unthrottled call, well inside the heartbeat second."""
    pub, reader, clock = pub_and_reader
    # The join frames were (0,0,0,0) at clock 1000.0. Same stat 0.5 s later: held back.
    clock.now += 0.5
    assert not any(pub.publish(lambda: (0, 0, 0, 0)) for _ in range(5))
    clock.now += 0.01
    assert [pub.publish(lambda: (1, 0, 5, 0)) for _ in range(5)][-1] is True
    assert expect(reader, 1) == [["LoadStat", 1, 0, 5, 0, 3]]


def test_unchanged_stat_is_resent_once_per_second(pub_and_reader: Any) -> None:
    """An idle engine: the same stat every call, one frame per elapsed second, never more."""
    pub, reader, clock = pub_and_reader
    start = clock.now
    sent_at: list[float] = []
    # 3.2 s of an idle scheduler loop calling every 10 ms: every 5th call looks (each 50 ms),
    # so the heartbeat goes out on the first look at or after 1 s: 1.05, 2.10, 3.15.
    for _ in range(320):
        clock.now += 0.01
        if pub.publish(lambda: (0, 0, 0, 0)):
            sent_at.append(round(clock.now - start, 2))
    assert len(sent_at) == 3, sent_at
    assert all(0.999 <= b - a <= 1.051 for a, b in zip([0.0, *sent_at], sent_at, strict=False)), sent_at
    assert expect(reader, 3) == [["LoadStat", 0, 0, 0, 0, 3]] * 3


def test_socket_options(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """The PUB socket has SNDHWM 8 and LINGER 0; IPv6 is on for an IPv6 endpoint only."""
    rec = RecordingContext(ctx)
    port = free_ports(2)
    v4 = LoadPublisher.bind(f"tcp://127.0.0.1:{port}", attn_dp_rank=0, context=rec)  # type: ignore[arg-type]
    v6 = LoadPublisher.bind(f"tcp://[::]:{port + 1}", attn_dp_rank=1, context=rec)  # type: ignore[arg-type]
    try:
        assert len(rec.made) == 2
        for sock in rec.made:
            assert sock.getsockopt(zmq.TYPE) == zmq.PUB
            assert sock.getsockopt(zmq.SNDHWM) == 8
            assert sock.getsockopt(zmq.LINGER) == 0
        assert [sock.getsockopt(zmq.IPV6) for sock in rec.made] == [0, 1]
    finally:
        v4.close()
        v6.close()


def test_slow_subscriber_gets_a_short_queue_not_a_backlog() -> None:
    """1000 frames to a subscriber that reads nothing: it later finds only ~8 queued (SNDHWM 8)."""
    endpoint = "inproc://audit-engine-hwm"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()  # inproc needs the publisher's context
    pub = LoadPublisher.bind(endpoint, attn_dp_rank=0)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 1)
    sub.setsockopt(zmq.SUBSCRIBE, b"load")
    sub.connect(endpoint)
    try:
        deadline = time.monotonic() + 10
        while not sub.poll(10) and time.monotonic() < deadline:
            pub.publish(lambda: (0, 0, 0, 1), force=True)
        while sub.poll(50):
            sub.recv_multipart()
        for i in range(1000):
            assert pub.publish(lambda i=i: (i + 1, 0, 0, 1), force=True)
        queued = 0
        while sub.poll(100):
            sub.recv_multipart()
            queued += 1
        # The pipe holds SNDHWM + the SUB's RCVHWM (1); a default HWM would have kept all 1000.
        assert 1 <= queued <= 10, queued
    finally:
        sub.close(linger=0)
        pub.close()


class Flaky:
    """A real bound PUB socket whose sends can be made to fail (e.g. a context being torn down)."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self.sock = sock
        self.fail = False

    def send_multipart(self, parts: Any, flags: int = 0) -> Any:
        if self.fail:
            raise zmq.ZMQError(zmq.ETERM)
        return self.sock.send_multipart(parts, flags)

    def close(self, linger: int | None = None) -> None:
        self.sock.close(linger=0)


def test_send_failures_never_raise_and_log_once_per_episode(
    ctx: zmq.Context[zmq.Socket[bytes]], readers: Callable[[list[str]], LoadReader]
) -> None:
    """Failing sends are swallowed, logged once per episode; frames after recovery keep seq gapless."""
    port = free_ports(1)
    sock = ctx.socket(zmq.PUB)
    sock.bind(f"tcp://127.0.0.1:{port}")
    flaky = Flaky(sock)
    clock = Clock()
    pub = LoadPublisher(flaky, attn_dp_rank=0, endpoint=f"tcp://127.0.0.1:{port}", clock=clock)
    reader = readers([f"tcp://127.0.0.1:{port}"])
    joined(pub, reader, clock)
    with structlog.testing.capture_logs() as logs:
        for episode in range(2):
            flaky.fail = True
            for i in range(20):
                assert pub.publish(lambda i=i: (100 + i, 0, 0, 0), force=True) is False
            flaky.fail = False
            assert pub.publish(lambda episode=episode: (episode + 1, 0, 0, 0), force=True) is True
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 2, logs
    assert all(str(port) in str(e) for e in warnings)
    assert reader.wait(lambda: [f.stat[1] for f in reader.frames[0]][-2:] == [1, 2])
    seqs = [f.seq for f in reader.frames[0]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def test_provider_errors_never_reach_the_scheduler_loop(pub_and_reader: Any) -> None:
    """A provider that raises (or returns what cannot be encoded) costs a frame, not the loop."""
    pub, reader, _clock = pub_and_reader

    def broken() -> Counts:
        raise RuntimeError("scheduler state torn")

    with structlog.testing.capture_logs() as logs:
        assert pub.publish(broken, force=True) is False
        assert pub.publish(lambda: (object(), 0, 0, 0), force=True) is False  # type: ignore[arg-type]
        assert pub.publish(lambda: (2, 0, 0, 0), force=True) is True
    assert sum(e["log_level"] == "warning" for e in logs) == 1
    assert expect(reader, 1) == [["LoadStat", 2, 0, 0, 0, 3]]


def test_closed_publisher_releases_its_port(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """After close() (LINGER 0) a restarted engine can bind the same endpoint again at once."""
    port = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    pub = LoadPublisher.bind(endpoint, attn_dp_rank=0, context=ctx)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    try:
        for i in range(50):
            pub.publish(lambda i=i: (i, 0, 0, 0), force=True)
        pub.close()
        assert not pub.enabled and pub.publish(lambda: (1, 1, 1, 1), force=True) is False
        again: list[LoadPublisher] = []

        def rebound() -> bool:
            try:
                again.append(LoadPublisher.bind(endpoint, attn_dp_rank=0, context=ctx))
            except OSError:
                return False
            return True

        assert until(rebound, 3.0), "the port stayed bound after close()"
        again[0].close()
    finally:
        sub.close(linger=0)


def test_only_publishing_ranks_bind_at_base_plus_rank(
    ctx: zmq.Context[zmq.Socket[bytes]], readers: Callable[[list[str]], LoadReader]
) -> None:
    """Per scheduler: pp/attn-TP/attn-CP rank 0 binds base + its (attention-)DP rank; the others bind nothing."""
    base = free_ports(3)
    load_range, reason = resolve_load_pub_range(
        kv_endpoint=f"tcp://*:{base - 3}",
        replay_endpoint=None,
        dp_size=3,
        load_publish_endpoint=f"tcp://*:{base}",
    )
    assert reason is None and load_range is not None
    load_range = dataclasses.replace(load_range, host="127.0.0.1")  # bind loopback only in tests
    silent = [
        create_load_publisher(load_range, dp_rank=0, attn_tp_rank=1, context=ctx),
        create_load_publisher(load_range, dp_rank=0, pp_rank=1, context=ctx),
        create_load_publisher(load_range, dp_rank=0, attn_cp_rank=1, context=ctx),
    ]
    assert not any(p.enabled for p in silent)
    assert port_free(base)
    # DP attention: the attention-DP rank picks the port and is the rank on the wire.
    pub = create_load_publisher(load_range, dp_rank=0, attn_dp_size=3, attn_dp_rank=2, context=ctx)
    try:
        assert pub.enabled and port_free(base) and not port_free(base + 2)
        reader = readers([f"tcp://127.0.0.1:{base + 2}"])
        values = iter(range(1, 10_000))

        def heard() -> bool:
            pub.publish(lambda: (next(values), 0, 0, 9), force=True)
            return bool(reader.frames[0])

        assert reader.wait(heard, 10.0)
        assert reader.latest(0) is not None and reader.latest(0)[5] == 2  # type: ignore[index]
    finally:
        pub.close()
