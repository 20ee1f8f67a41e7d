"""The bench-only libzmq ingest (the comparison row of bench/load_ingest.py) accounts as the product's does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import zmq

from bench.libzmq_subscriber import LibzmqSubscriber
from controlplane.load.table import LoadTable, RankState
from controlplane.load.wire import LoadStat
from tests.fakes.load_peers import Pub, until

URL = "http://127.0.0.1:9001"


@pytest.fixture
def ctx() -> zmq.Context[zmq.Socket[bytes]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context  # type: ignore[misc]
    context.destroy(linger=0)


@pytest.fixture
async def ingest() -> AsyncIterator[tuple[LoadTable, LibzmqSubscriber]]:
    table = LoadTable(stale_after_s=3.0)
    sub = LibzmqSubscriber(table, lambda: None)
    yield table, sub
    sub.close()


async def connected(pub: Pub, table: LoadTable, sub: LibzmqSubscriber) -> RankState:
    """Subscribe ``URL`` to ``pub``; send heartbeats until one arrives (ZMQ's slow joiner)."""
    (rank,) = table.set_worker(URL, [pub.endpoint])
    sub.subscribe(URL, [rank], b"load")
    deadline = time.monotonic() + 5.0
    while rank.frames_received == 0:
        assert time.monotonic() < deadline, "subscriber never received a frame"
        pub.send(LoadStat(0, 0, 0, 0, 0))
        await asyncio.sleep(0.02)
    return rank


async def test_garbage_is_counted_and_valid_frames_still_flow(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LibzmqSubscriber]
) -> None:
    """Malformed frames are counted and dropped, a good one after them is accounted."""
    table, sub = ingest
    pub = Pub(ctx)
    rank = await connected(pub, table, sub)
    seq = b"\x00" * 7 + b"\x09"
    garbage = [[b"load", seq], [b"load", seq, b"\xc1\xc1"], [b"load", seq, b"x", b"extra"]]
    for frames in garbage:
        pub.send_raw(frames)
    pub.send(LoadStat(9, 9, 9, 9, 0))
    await until(lambda: rank.stat is not None and rank.stat.num_running_reqs == 9)
    assert rank.malformed_frames == len(garbage)


async def test_a_burst_is_read_whole(
    ctx: zmq.Context[zmq.Socket[bytes]], ingest: tuple[LoadTable, LibzmqSubscriber]
) -> None:
    """A burst queued on one socket is all accounted, in order; unsubscribing closes the socket."""
    table, sub = ingest
    pub = Pub(ctx)
    rank = await connected(pub, table, sub)
    start = rank.frames_received
    for i in range(50):
        pub.send(LoadStat(i, 0, 0, 0, 0))
    await asyncio.sleep(0.2)
    sub.drain()
    assert rank.frames_received - start == 50 and rank.stat is not None and rank.stat.num_running_reqs == 49
    assert sub.unsubscribe(URL) == 1 and sub.socket_count() == 0
