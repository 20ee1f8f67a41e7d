"""The WatchLoads hub: coalesced versions, newest-wins deltas, removals, the freshness tick."""

from __future__ import annotations

import asyncio
import time

from controlplane.load.hub import LoadHub
from controlplane.load.table import LoadTable
from controlplane.load.wire import LoadStat
from controlplane.v1 import load_pb2

A, B = "http://a:1", "http://b:1"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def decode(raw: list[bytes]) -> dict[str, load_pb2.WorkerLoad]:
    loads = [load_pb2.WorkerLoad.FromString(b) for b in raw]
    return {w.url: w for w in loads}


async def test_slow_watcher_gets_only_the_newest_state_of_each_worker() -> None:
    """A watcher that missed many versions receives one entry per changed worker, the newest."""
    clock = Clock()
    table = LoadTable(stale_after_s=3.0)
    hub = LoadHub(table, push_interval_s=0.05, clock=clock)
    (a,) = table.set_worker(A, ["tcp://h:1"])
    (b,) = table.set_worker(B, ["tcp://h:2"])
    with hub.subscribe():
        start = hub.full()
        assert start.full and set(decode(start.workers)) == {A, B}
        table.record_frame(b, 0, LoadStat(7, 0, 0, 10, 0), clock.now)
        for seq in range(50):
            table.record_frame(a, seq, LoadStat(seq, 0, 0, 10, 0), clock.now)
            assert hub.publish()
        delta = hub.since(start.version)
    assert not delta.full and delta.version == start.version + 50
    assert len(delta.workers) == 2
    assert decode(delta.workers)[A].num_running_reqs == 49


async def test_a_full_view_is_not_followed_by_what_it_already_showed() -> None:
    """A frame and a rank's deadline passing before the full view are not sent again as changes."""
    clock = Clock()
    table = LoadTable(stale_after_s=3.0)
    hub = LoadHub(table, push_interval_s=0.05, clock=clock)
    (a,) = table.set_worker(A, ["tcp://h:1"])
    (b,) = table.set_worker(B, ["tcp://h:2"])
    table.record_frame(a, 0, LoadStat(1, 0, 0, 10, 0), clock.now)
    hub.publish()
    clock.now = 3.5  # A's deadline has passed; no tick has re-evaluated freshness yet
    table.record_frame(b, 0, LoadStat(2, 0, 0, 10, 0), clock.now)
    with hub.subscribe():
        start = hub.full()
        shown = decode(start.workers)
        assert shown[A].freshness == load_pb2.FRESHNESS_STALE and shown[B].num_running_reqs == 2
        clock.now = 3.6
        hub.publish()
        delta = hub.since(start.version)
    assert not delta


async def test_removed_worker_is_reported_once_and_not_after_readding() -> None:
    """Removal shows in removed_urls of deltas after it; re-adding takes it out of the list."""
    table = LoadTable(stale_after_s=3.0)
    hub = LoadHub(table, push_interval_s=0.05, clock=Clock())
    table.set_worker(A, [])
    with hub.subscribe():
        hub.publish()
        v = hub.version
        table.remove_worker(A)
        hub.publish()
        assert hub.since(v).removed == [A]
        assert hub.since(hub.version).removed == []
        table.set_worker(A, [])
        hub.publish()
        delta = hub.since(v)
    assert delta.removed == [] and list(decode(delta.workers)) == [A]


async def test_nothing_changed_publishes_nothing() -> None:
    """publish() without a table change creates no version and wakes nobody."""
    table = LoadTable(stale_after_s=3.0)
    hub = LoadHub(table, push_interval_s=0.05, clock=Clock())
    table.set_worker(A, [])
    assert hub.publish() and not hub.publish()


async def test_ticker_coalesces_to_the_push_interval_and_pushes_stale_without_frames() -> None:
    """Constant changes publish at most once per interval; a silent rank still turns STALE."""
    table = LoadTable(stale_after_s=0.3)
    hub = LoadHub(table, push_interval_s=0.05)
    (a,) = table.set_worker(A, ["tcp://h:1"])
    task = asyncio.create_task(hub.run())
    try:
        with hub.subscribe():
            start = hub.version
            deadline = time.monotonic() + 0.5
            seq = 0
            while time.monotonic() < deadline:
                table.record_frame(a, seq, LoadStat(seq, 0, 0, 10, 0), time.monotonic())
                hub.mark_dirty()
                seq += 1
                await asyncio.sleep(0.002)
            pushes = hub.version - start
            assert 5 <= pushes <= 12, pushes  # ~0.5 s / 50 ms, never one per frame (~200)
            before = hub.version
            await asyncio.sleep(0.6)
            delta = hub.since(before)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert decode(delta.workers)[A].freshness == load_pb2.FRESHNESS_STALE


async def test_each_push_includes_what_the_drain_read_just_before_it() -> None:
    """The ticker drains the ingest right before pushing: frames read then are in that push."""
    table = LoadTable(stale_after_s=3.0)
    (a,) = table.set_worker(A, ["tcp://h:1"])
    drained: list[int] = []

    def drain() -> None:  # stands in for the ingest reading its sockets
        drained.append(1)
        table.record_frame(a, len(drained), LoadStat(len(drained), 0, 0, 10, 0), time.monotonic())

    hub = LoadHub(table, push_interval_s=0.01, drain=drain)
    with hub.subscribe():
        version = hub.full().version
        ticker = asyncio.create_task(hub.run())
        try:
            hub.mark_dirty()
            deadline = time.monotonic() + 2.0
            while hub.version == version:
                assert time.monotonic() < deadline, "no push"
                await asyncio.sleep(0.005)
            pushed = decode(hub.since(version).workers)[A]
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
    assert drained and pushed.ranks[0].seq >= 1 and pushed.num_running_reqs == pushed.ranks[0].seq
