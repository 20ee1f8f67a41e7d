"""The load ingest over loopback: libzmq PUB sockets send good and bad frames to LoadSubscriber."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from controlplane.load.ingest import subscriber
from controlplane.load.ingest.subscriber import LoadSubscriber
from controlplane.load.table import Freshness, LoadTable, RankState
from controlplane.load.wire import LoadStat, decode_frame, encode_frame
from tests.fakes.load_peers import Pub, until

URL = "http://127.0.0.1:9001"


@pytest.fixture
def ctx() -> zmq.Context[zmq.Socket[bytes]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context  # type: ignore[misc]
    context.destroy(linger=0)


@pytest.fixture
async def ingest() -> AsyncIterator[tuple[LoadTable, LoadSubscriber, list[int]]]:
    table = LoadTable(stale_after_s=3.0)
    wakeups: list[int] = []
    sub = LoadSubscriber(table, lambda: wakeups.append(1))
    yield table, sub, wakeups
    sub.close()


async def connect(pub: Pub, table: LoadTable, url: str = URL) -> None:
    """Send heartbeats until the SUB is connected (ZMQ's slow joiner drops the first ones)."""
    deadline = time.monotonic() + 5.0
    while (view := table.view(url, time.monotonic())) is None or view.ranks[0].frames_received == 0:
        assert time.monotonic() < deadline, "subscriber never received a frame"
        pub.send(LoadStat(0, 0, 0, 0, 0))
        await asyncio.sleep(0.02)


async def one_rank_worker(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> tuple[Pub, RankState]:
    """A publisher for a one-rank worker at ``URL``, subscribed to and connected."""
    table, sub, _ = ingest
    pub = Pub(ctx)
    (rank,) = table.set_worker(URL, [pub.endpoint])
    sub.subscribe(URL, [rank], b"load")
    await connect(pub, table)
    return pub, rank


async def test_frames_reach_the_table(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """A frame published on a rank's endpoint updates that rank and wakes the hub."""
    table, sub, wakeups = ingest
    pubs = [Pub(ctx), Pub(ctx)]
    sub.subscribe(URL, table.set_worker(URL, [p.endpoint for p in pubs]), b"load")
    for p in pubs:
        await connect(p, table)
    pubs[0].send(LoadStat(3, 1, 100, 1000, 0))
    pubs[1].send(LoadStat(4, 2, 200, 1000, 1))
    await until(lambda: table.view(URL, time.monotonic()).num_running_reqs == 7)  # type: ignore[union-attr]
    view = table.view(URL, time.monotonic())
    assert view is not None and view.freshness is Freshness.FRESH
    assert (view.num_waiting_reqs, view.num_tokens, view.max_total_num_tokens) == (3, 300, 2000)
    assert wakeups


async def test_garbage_is_counted_and_valid_frames_still_flow(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """Wrong frame count, bad msgpack, wrong tag, short seq and huge frames are counted; good ones pass."""
    pub, rank = await one_rank_worker(ctx, ingest)
    seq = b"\x00" * 7 + b"\x09"
    garbage = [
        [b"load", seq],
        [b"load", seq, b"\xc1\xc1"],
        [b"load", seq, b"\x96\xa8NotAStat\x01\x02\x03\x04\xc0"],
        [b"load", b"\x01", b"\x96"],
        [b"load", seq, b"\x00" * 2_000_000],
        [b"load", seq, b"x", b"extra"],
    ]
    for frames in garbage:
        pub.send_raw(frames)
    pub.send(LoadStat(9, 9, 9, 9, 0))
    await until(lambda: rank.stat is not None and rank.stat.num_running_reqs == 9)
    assert rank.malformed_frames == len(garbage)
    _, sub, _ = ingest
    assert sub.socket_count(URL) == 1


async def test_gap_and_restart_are_counted(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """A skipped sequence range counts as dropped; seq going back to 0 counts a restart."""
    pub, rank = await one_rank_worker(ctx, ingest)
    pub.send(LoadStat(1, 0, 0, 0, 0), seq=100)
    pub.send(LoadStat(2, 0, 0, 0, 0), seq=105)
    pub.send(LoadStat(3, 0, 0, 0, 0), seq=0)
    await until(lambda: rank.stat is not None and rank.stat.num_running_reqs == 3)
    assert rank.publisher_restarts == 1
    assert rank.dropped_frames >= 4  # 101..104, plus whatever the connect loop skipped


async def test_unsubscribe_closes_sockets(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """Unsubscribing closes the worker's sockets: the publisher sees its subscriber disconnect."""
    table, sub, _ = ingest
    pub = Pub(ctx)
    monitor = pub.sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    sub.subscribe(URL, table.set_worker(URL, [pub.endpoint]), b"load")
    await connect(pub, table)
    assert sub.unsubscribe(URL) == 1 and sub.socket_count() == 0
    events: list[int] = []
    deadline = time.monotonic() + 5.0
    while zmq.EVENT_DISCONNECTED not in events:
        assert time.monotonic() < deadline, f"no disconnect seen: {events}"
        if monitor.poll(10):
            events.append(recv_monitor_message(monitor)["event"])
        await asyncio.sleep(0)
    pub.sock.disable_monitor()
    monitor.close(linger=0)


async def test_many_frames_are_drained_across_budgets(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """A burst bigger than one drain budget is fully consumed (the edge-triggered FD is re-polled)."""
    pub, rank = await one_rank_worker(ctx, ingest)
    start = rank.frames_received
    for i in range(100):
        pub.send(LoadStat(i, 0, 0, 0, 0))
    await until(lambda: rank.frames_received - start == 100)
    assert rank.dropped_frames == 0


async def test_frames_from_many_sockets_are_accounted_in_few_batches(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """One frame from each of 40 sockets at once: all accounted, in a few change notifications."""
    table, sub, wakeups = ingest
    pubs = [Pub(ctx) for _ in range(40)]
    ranks = table.set_worker(URL, [p.endpoint for p in pubs])
    sub.subscribe(URL, ranks, b"load")
    deadline = time.monotonic() + 5.0
    while not all(r.frames_received for r in ranks):  # ZMQ's slow joiner drops the first ones
        assert time.monotonic() < deadline, [r.frames_received for r in ranks]
        for p in pubs:
            p.send(LoadStat(0, 0, 0, 0, 0))
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    before = [r.frames_received for r in ranks]
    notified = len(wakeups)
    for burst in range(5):
        for p in pubs:
            p.send(LoadStat(burst, 0, 0, 0, 0))
        await asyncio.sleep(0.01)
    await until(lambda: all(r.frames_received - b == 5 for r, b in zip(ranks, before, strict=True)))
    assert all(r.stat is not None and r.stat.num_running_reqs == 4 for r in ranks)
    assert all(r.dropped_frames == 0 for r in ranks)
    # 200 frames on 40 connections: coalesced wakeups, not one per frame.
    assert len(wakeups) - notified < 40
    for p in pubs:
        p.close()


async def test_ipv6_literal_and_localhost_endpoints_connect(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """tcp://[::1]:P reaches a v6 publisher; tcp://localhost:P reaches a v4-only one."""
    table, sub, _ = ingest
    v4 = Pub(ctx)
    v6 = ctx.socket(zmq.PUB)
    v6.setsockopt(zmq.LINGER, 0)
    v6.setsockopt(zmq.IPV6, 1)
    v6.bind("tcp://[::1]:*")
    v6_endpoint = v6.getsockopt_string(zmq.LAST_ENDPOINT)
    port4 = v4.endpoint.rsplit(":", 1)[1]
    ranks = table.set_worker(URL, [v6_endpoint, f"tcp://localhost:{port4}"])
    sub.subscribe(URL, ranks, b"load")
    deadline = time.monotonic() + 5
    while not all(r.frames_received for r in ranks):
        assert time.monotonic() < deadline, [r.frames_received for r in ranks]
        v6.send_multipart(encode_frame(0, LoadStat(1, 0, 0, 0, 0)))
        v4.send(LoadStat(2, 0, 0, 0, 1))
        await asyncio.sleep(0.02)
    v6.close(linger=0)


async def test_an_engine_restarted_on_its_port_is_one_restart_and_no_drops(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """A publisher closes, a new one binds its port and is ahead of the old seq: a restart, no drops."""
    pub, rank = await one_rank_worker(ctx, ingest)
    old_seq = rank.seq
    endpoint = pub.endpoint
    pub.close()
    again = None
    deadline = time.monotonic() + 5
    while again is None:  # libzmq releases the port asynchronously
        try:
            again = Pub(ctx, endpoint)
        except zmq.ZMQError:
            assert time.monotonic() < deadline, "the port was not released"
            await asyncio.sleep(0.02)
    try:
        # What it sent before we reconnected went to nobody: the first frame we see is ahead.
        again.seq = old_seq + 10
        while rank.publisher_restarts == 0:
            assert time.monotonic() < deadline + 5, "no frame from the restarted publisher"
            again.send(LoadStat(5, 0, 0, 0, 0))
            await asyncio.sleep(0.02)
        assert rank.dropped_frames == 0 and rank.stat is not None and rank.stat.num_running_reqs == 5
    finally:
        again.close()


async def test_a_bug_met_on_one_stream_reconnects_that_publisher_only(
    ctx: zmq.Context[zmq.Socket[bytes]],
    ingest: tuple[LoadTable, LoadSubscriber, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unexpected error accounting one publisher's frame drops that connection; others flow."""
    table, sub, _ = ingest
    good, bad = Pub(ctx), Pub(ctx)
    ranks = table.set_worker(URL, [good.endpoint, bad.endpoint])
    sub.subscribe(URL, ranks, b"load")

    def buggy(frames: list[bytes]) -> tuple[int, LoadStat]:
        seq, stat = decode_frame(frames)
        if stat.num_running_reqs == 666:
            raise RuntimeError("a bug")
        return seq, stat

    monkeypatch.setattr(subscriber, "decode_frame", buggy)
    monitor = bad.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        deadline = time.monotonic() + 5
        while not monitor.poll(0) or ranks[0].stat is None or ranks[0].stat.num_running_reqs != 2:
            assert time.monotonic() < deadline, "the bug stopped the ingest or did not drop the stream"
            bad.send(LoadStat(666, 0, 0, 0, 1))
            good.send(LoadStat(2, 0, 0, 0, 0))
            await asyncio.sleep(0.02)
    finally:
        bad.sock.disable_monitor()
        monitor.close(linger=0)
    assert sub.socket_count(URL) == 2  # the dropped one is being reconnected, not forgotten


async def test_heartbeating_publisher_is_answered_and_stays_connected(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """A PUB with ZMTP heartbeats (100 ms, 300 ms timeout) keeps its one connection: PINGs get PONGs."""
    table, sub, _ = ingest
    pub = Pub(ctx, heartbeat_ms=100)
    monitor = pub.sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    (rank,) = table.set_worker(URL, [pub.endpoint])
    sub.subscribe(URL, [rank], b"load")
    await connect(pub, table)
    for _ in range(50):  # a second: several heartbeat timeouts
        pub.send(LoadStat(1, 0, 0, 0, 0))
        await asyncio.sleep(0.02)
    events = []
    while monitor.poll(0):
        events.append(recv_monitor_message(monitor)["event"])
    pub.sock.disable_monitor()
    monitor.close(linger=0)
    assert events == [zmq.EVENT_ACCEPTED]
    assert rank.publisher_restarts == 0 and rank.dropped_frames == 0


async def test_a_peer_that_is_not_a_publisher_is_retried_until_one_is(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LoadSubscriber, list[int]]
) -> None:
    """An endpoint answering HTTP instead of ZMTP is retried quietly; a PUB bound there later is read."""
    table, sub, _ = ingest
    answered = 0

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        answered += 1
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n".ljust(64, b" "))
        writer.close()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    (rank,) = table.set_worker(URL, [f"tcp://127.0.0.1:{port}"])
    sub.subscribe(URL, [rank], b"load")
    await until(lambda: answered >= 2)  # refused, then tried again after the backoff
    server.close()
    await server.wait_closed()
    pub = Pub(ctx, f"tcp://127.0.0.1:{port}")
    await connect(pub, table)
    assert rank.frames_received >= 1 and rank.malformed_frames == 0


@pytest.mark.parametrize("size", [100_000, 8 * 1024 * 1024])
async def test_a_frame_over_the_size_limit_is_counted_malformed_and_the_connection_stays(
    ctx: zmq.Context[zmq.Socket[bytes]],
    ingest: tuple[LoadTable, LoadSubscriber, list[int]],
    size: int,
) -> None:
    """A frame bigger than MAX_FRAME_BYTES is discarded unbuffered and counted; frames then flow."""
    assert size > subscriber.MAX_FRAME_BYTES
    pub, rank = await one_rank_worker(ctx, ingest)
    monitor = pub.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        pub.send_raw([b"load", b"\x00" * 8, b"\x00" * size])
        deadline = time.monotonic() + 10.0
        while rank.malformed_frames == 0:
            assert time.monotonic() < deadline, "the oversized frame was not counted"
            await asyncio.sleep(0.01)
        before = rank.frames_received
        pub.send(LoadStat(3, 0, 0, 0, 0))
        while rank.frames_received == before:
            assert time.monotonic() < deadline, "no frame after the oversized one"
            await asyncio.sleep(0.01)
        assert not monitor.poll(0), "the connection was dropped"
    finally:
        pub.sock.disable_monitor()
        monitor.close(linger=0)
    assert rank.malformed_frames == 1 and rank.stat is not None and rank.stat.num_running_reqs == 3
