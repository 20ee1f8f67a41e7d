"""WatchLoads as a black box (SPEC §6): deltas, coalescing, newest-wins, several watchers, removal.

``tests/e2e/loads/test_load_service.py`` already checks the full first message, STALE pushed
without a frame and a removal being pushed; these go further.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import zmq

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.load_publishers import (
    PUSH_INTERVAL_S,
    STALE_AFTER_S,
    Publisher,
    Watcher,
    deregister,
    fake_url,
    frame,
    metric,
    rank,
    register,
    until,
    view,
)

Pubs = Callable[..., tuple[zmq.Socket[bytes], int]]


def joined(stub: load_pb2_grpc.LoadServiceStub, pubs: Pubs, ranks: int = 1) -> tuple[str, list[Publisher]]:
    """A registered worker whose every rank's frames have reached the view."""
    url = fake_url()
    publishers = [Publisher(*pubs(), dp_rank=i) for i in range(ranks)]
    register(stub, url, [f"tcp://127.0.0.1:{p.port}" for p in publishers])
    for i, p in enumerate(publishers):
        p.url = url
        p.join(lambda i=i: rank(stub, url, i).frames_received > 0)
    return url, publishers


def test_deltas_carry_only_the_workers_that_changed(stub, pubs, watch) -> None:  # type: ignore[no-untyped-def]
    """After the full view, a worker whose state does not change never appears in a delta."""
    busy_url, (busy,) = joined(stub, pubs)
    quiet_url, _ = joined(stub, pubs)
    until(lambda: view(stub, quiet_url).freshness == pb.FRESHNESS_STALE)  # and stays STALE
    watcher = watch()
    until(lambda: len(watcher.messages) >= 1)
    first = watcher.messages[0][1]
    assert first.full and {busy_url, quiet_url} <= {w.url for w in first.workers}
    for running in range(2, 40):
        busy.send(running=running)
        time.sleep(0.02)
    until(lambda: any(w.num_running_reqs == 39 for w in watcher.workers(busy_url)))
    deltas = [m for _, m in watcher.messages[1:]]
    assert deltas and not any(m.full for m in deltas)
    assert quiet_url not in {w.url for m in deltas for w in m.workers}
    assert watcher.latest()[quiet_url].freshness == pb.FRESHNESS_STALE
    deregister(stub, busy_url)
    deregister(stub, quiet_url)


def test_a_burst_is_coalesced_to_one_message_per_push_interval(stub, pubs, watch) -> None:  # type: ignore[no-untyped-def]
    """500 frames a second for 1.5 s reach a watcher as at most one message per interval, the last one newest."""
    url, (p,) = joined(stub, pubs)
    watcher = watch()
    until(lambda: len(watcher.messages) >= 1)
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < 1.5:
        p.send(running=p.seq)
        sent += 1
        time.sleep(0.002)
    last = p.seq - 1
    until(lambda: watcher.latest()[url].num_running_reqs == last)
    burst_s = time.monotonic() - started
    pushed = [t for t, m in watcher.messages[1:] if any(w.url == url for w in m.workers)]
    assert sent > 200
    assert 3 <= len(pushed) <= burst_s / PUSH_INTERVAL_S + 2, (len(pushed), burst_s)
    assert len(watcher.messages) - 1 <= burst_s / PUSH_INTERVAL_S + 2
    deregister(stub, url)


def test_a_watcher_that_stops_reading_gets_the_newest_values_not_a_backlog(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs: Pubs
) -> None:
    """A watcher whose window is full is not queued for: when it reads again, the newest state comes next.

    The client announces a 1 KiB HTTP/2 window, so a few small messages fill it and the
    server cannot send more while the watcher is not reading; 40 push intervals pass.
    """
    url, (p,) = joined(stub, pubs)
    small_window = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
    with grpc.insecure_channel(plane.target, options=small_window) as channel:
        call = load_pb2_grpc.LoadServiceStub(channel).WatchLoads(pb.WatchLoadsRequest(router_id="slow"))
        try:
            stream = iter(call)
            assert next(stream).full
            pause_s = 40 * PUSH_INTERVAL_S
            started = time.monotonic()
            while time.monotonic() - started < pause_s:
                p.send(running=p.seq)
                time.sleep(0.005)
            newest = p.seq - 1
            read = 0
            for message in stream:
                read += 1
                mine = [w for w in message.workers if w.url == url]
                if mine and mine[0].num_running_reqs == newest:
                    break
            # What the client's 1 KiB window held (~10 messages), then the newest state.
            assert read <= 15, read
        finally:
            call.cancel()
    deregister(stub, url)


def test_several_watchers_agree_and_a_late_one_starts_from_a_full_view(stub, pubs, watch) -> None:  # type: ignore[no-untyped-def]
    """Three watchers converge on the same state; one opened later gets everything as it is now."""
    urls = [joined(stub, pubs, ranks=2) for _ in range(2)]
    watchers = [watch() for _ in range(3)]
    for i, (_, publishers) in enumerate(urls):
        for j, p in enumerate(publishers):
            p.send(running=10 * i + j + 1, capacity=100)

    def settled(w: Watcher) -> bool:
        state = w.latest()
        return all(
            url in state and state[url].num_running_reqs == 20 * i + 3 for i, (url, _) in enumerate(urls)
        )

    for w in watchers:
        until(lambda w=w: settled(w))
    late = watch()
    until(lambda: len(late.messages) >= 1)
    first = late.messages[0][1]
    assert first.full
    now = {w.url: w for w in stub.GetLoads(pb.GetLoadsRequest(), timeout=10).workers}
    shown = {w.url: w for w in first.workers}
    assert set(shown) == set(now)
    for url, _ in urls:
        assert (shown[url].num_running_reqs, shown[url].max_total_num_tokens, len(shown[url].ranks)) == (
            now[url].num_running_reqs,
            200,
            2,
        )
    for url, _ in urls:
        deregister(stub, url)
    for w in [*watchers, late]:
        until(lambda w=w: not {url for url, _ in urls} & set(w.latest()))


def test_deregistering_pushes_a_removal_and_closes_every_rank_socket(
    plane, stub, pubs, watch, monitors
) -> None:  # type: ignore[no-untyped-def]
    """The publisher sees its subscriber leave once the worker is deregistered; watchers see it removed."""
    url = fake_url()
    publishers = [Publisher(*pubs(), dp_rank=i) for i in range(2)]
    seen = [monitors(p.sock) for p in publishers]
    subscriptions = metric(plane, "fleetplane_load_subscriptions")
    register(stub, url, [f"tcp://127.0.0.1:{p.port}" for p in publishers])
    assert metric(plane, "fleetplane_load_subscriptions") == subscriptions + 2
    for m in seen:
        until(lambda m=m: m.connected == 1)
    watcher = watch()
    until(lambda: url in watcher.latest())
    deregister(stub, url)
    until(lambda: any(url in m.removed_urls for _, m in watcher.messages))
    assert url not in watcher.latest()
    for m in seen:
        until(lambda m=m: m.connected == 0)
    time.sleep(2 * PUSH_INTERVAL_S + 0.3)  # a reconnect would come within the 100 ms backoff
    assert [m.connected for m in seen] == [0, 0]
    assert url not in {w.url for w in stub.ListWorkers(pb.ListWorkersRequest(), timeout=10).workers}
    assert metric(plane, "fleetplane_load_subscriptions") == subscriptions


def test_registering_the_same_host_port_as_h2c_replaces_the_http_worker(stub, pubs, watch, monitors) -> None:  # type: ignore[no-untyped-def]
    """http://H:P then h2c://H:P: watchers see the first removed and the second added; one subscriber stays."""
    http_url = fake_url()
    h2c_url = http_url.replace("http://", "h2c://")
    p = Publisher(*pubs())
    seen = monitors(p.sock)
    register(stub, http_url, [f"tcp://127.0.0.1:{p.port}"])
    p.join(lambda: rank(stub, http_url).num_running_reqs == 1)
    watcher = watch()
    until(lambda: http_url in watcher.latest())
    stub.RegisterWorker(
        pb.RegisterWorkerRequest(
            url=h2c_url, models=["audit-model"], load_endpoints=[f"tcp://127.0.0.1:{p.port}"]
        ),
        timeout=30,
    )
    until(lambda: http_url not in watcher.latest() and h2c_url in watcher.latest())
    assert any(http_url in m.removed_urls for _, m in watcher.messages)
    p.join(lambda: rank(stub, h2c_url).num_running_reqs == 2, running=2)
    until(lambda: seen.connected == 1 and seen.accepted == 2)  # the old connection went, one new one
    deregister(stub, h2c_url)


def test_re_registering_with_changed_endpoints_moves_the_subscription(stub, pubs, watch, monitors) -> None:  # type: ignore[no-untyped-def]
    """New endpoints: the old publisher loses its subscriber, the new ones are subscribed and counted."""
    url = fake_url()
    old = Publisher(*pubs())
    old_seen = monitors(old.sock)
    register(stub, url, [f"tcp://127.0.0.1:{old.port}"])
    old.join(lambda: rank(stub, url).num_running_reqs == 7, running=7)
    assert old_seen.connected == 1
    new = [Publisher(*pubs(), dp_rank=i) for i in range(2)]
    new_seen = [monitors(p.sock) for p in new]
    watcher = watch()
    until(lambda: url in watcher.latest())
    register(stub, url, [f"tcp://127.0.0.1:{p.port}" for p in new])
    for m in new_seen:
        until(lambda m=m: m.connected == 1)
    until(lambda: old_seen.connected == 0)
    # Pushed: the worker now has two ranks, neither heard yet.
    until(lambda: len(watcher.latest()[url].ranks) == 2)
    assert [r.endpoint for r in watcher.latest()[url].ranks] == [f"tcp://127.0.0.1:{p.port}" for p in new]
    assert watcher.latest()[url].freshness == pb.FRESHNESS_UNKNOWN
    for i, p in enumerate(new):
        p.join(lambda i=i: rank(stub, url, i).frames_received > 0, running=i + 1)
    # The old publisher is no longer heard.
    for seq in range(1000, 1010):
        old.send_raw(frame(seq, 99, 0, 0, 0, 0))
    time.sleep(3 * PUSH_INTERVAL_S)
    w = view(stub, url)
    assert w.num_running_reqs == 3 and w.freshness == pb.FRESHNESS_FRESH
    until(lambda: watcher.latest()[url].num_running_reqs == 3)
    deregister(stub, url)


def test_stale_is_pushed_at_the_threshold_and_fresh_again_on_the_next_frame(stub, pubs, watch) -> None:  # type: ignore[no-untyped-def]
    """A silent worker's STALE reaches a watcher within a push interval of the threshold; a frame brings FRESH."""
    url, (p,) = joined(stub, pubs)
    watcher = watch()
    p.send()
    until(lambda: url in watcher.latest() and watcher.latest()[url].freshness == pb.FRESHNESS_FRESH)
    silent_at = time.monotonic()
    p.send(running=2)
    until(lambda: watcher.latest()[url].freshness == pb.FRESHNESS_STALE)
    stale_at = next(
        t
        for t, m in watcher.messages
        for w in m.workers
        if w.url == url and w.freshness == pb.FRESHNESS_STALE
    )
    late_by = stale_at - silent_at - STALE_AFTER_S
    assert -0.05 <= late_by < 1.0, late_by
    p.send(running=3)
    until(lambda: watcher.latest()[url].freshness == pb.FRESHNESS_FRESH)
    assert watcher.latest()[url].num_running_reqs == 3
    deregister(stub, url)
