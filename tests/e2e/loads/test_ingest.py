"""Load ingest as a black box (SPEC §6, §7): sums over ranks, freshness over time, exact frame accounting."""

from __future__ import annotations

import time

import zmq

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.load_publishers import (
    STALE_AFTER_S,
    Publisher,
    deregister,
    fake_url,
    frame_counters,
    rank,
    register,
    until,
    view,
)


def test_three_ranks_are_summed_with_per_rank_detail(stub: load_pb2_grpc.LoadServiceStub, pubs) -> None:  # type: ignore[no-untyped-def]
    """Running, waiting, KV tokens and capacity are sums over the ranks; each rank keeps its own detail."""
    url = fake_url()
    ranks = [Publisher(*pubs(), dp_rank=i) for i in range(3)]
    ranks[2].dp_rank = None  # attn_dp_rank may be nil (SPEC §7)
    register(stub, url, [f"tcp://127.0.0.1:{p.port}" for p in ranks])
    for i, p in enumerate(ranks):
        p.join(lambda i=i: rank(stub, url, i).frames_received > 0)
    values = [(3, 1, 100, 1000), (0, 7, 250, 2000), (5, 0, 0, 4096)]
    sent = [p.send(*v) for p, v in zip(ranks, values, strict=True)]
    until(lambda: [r.seq for r in view(stub, url).ranks] == sent)
    w = view(stub, url)
    assert (w.num_running_reqs, w.num_waiting_reqs, w.num_tokens, w.max_total_num_tokens) == (8, 8, 350, 7096)
    assert w.freshness == pb.FRESHNESS_FRESH
    for i, (r, v) in enumerate(zip(w.ranks, values, strict=True)):
        assert r.dp_rank == i and r.endpoint == f"tcp://127.0.0.1:{ranks[i].port}"
        assert (r.num_running_reqs, r.num_waiting_reqs, r.num_tokens, r.max_total_num_tokens) == v
        assert r.freshness == pb.FRESHNESS_FRESH and 0 <= r.age_s < STALE_AFTER_S
        assert r.dropped_frames == 0 and r.malformed_frames == 0 and r.publisher_restarts == 0
    assert 0 <= w.age_s <= max(r.age_s for r in w.ranks) + 0.5
    deregister(stub, url)


def test_freshness_unknown_fresh_stale_and_back(stub: load_pb2_grpc.LoadServiceStub, pubs) -> None:  # type: ignore[no-untyped-def]
    """UNKNOWN before a frame; one silent rank makes the worker STALE after the threshold; a frame recovers it."""
    url = fake_url()
    a, b = Publisher(*pubs(), dp_rank=0), Publisher(*pubs(), dp_rank=1)
    register(stub, url, [f"tcp://127.0.0.1:{a.port}", f"tcp://127.0.0.1:{b.port}"])
    w = view(stub, url)
    assert w.freshness == pb.FRESHNESS_UNKNOWN
    assert [(r.freshness, r.seq, r.age_s, r.frames_received) for r in w.ranks] == [
        (pb.FRESHNESS_UNKNOWN, -1, 0.0, 0)
    ] * 2
    a.join(lambda: rank(stub, url, 0).frames_received > 0, running=2)
    w = view(stub, url)
    # One rank heard, the other not yet: the worker is not FRESH (it needs every rank).
    assert w.ranks[0].freshness == pb.FRESHNESS_FRESH and w.ranks[1].freshness == pb.FRESHNESS_UNKNOWN
    assert w.freshness == pb.FRESHNESS_UNKNOWN and w.num_running_reqs == 2
    b.join(lambda: view(stub, url).freshness == pb.FRESHNESS_FRESH)
    # Rank 1 goes silent, rank 0 keeps publishing: rank 1 turns STALE, and so does the worker.
    deadline = time.monotonic() + 10
    while rank(stub, url, 1).freshness != pb.FRESHNESS_STALE:
        assert time.monotonic() < deadline
        a.send(running=2)
        time.sleep(0.05)
    w = view(stub, url)
    assert w.freshness == pb.FRESHNESS_STALE
    assert w.ranks[0].freshness == pb.FRESHNESS_FRESH
    assert w.ranks[1].age_s >= STALE_AFTER_S and w.age_s >= STALE_AFTER_S
    # The stale rank's last values still count in the sums (a view, not a guess).
    assert w.num_running_reqs == 3
    b.send(running=4)
    until(lambda: view(stub, url).freshness == pb.FRESHNESS_FRESH)
    w = view(stub, url)
    assert w.num_running_reqs == 6 and w.ranks[1].age_s < STALE_AFTER_S
    deregister(stub, url)


def test_gaps_and_restarts_are_counted_exactly_and_match_metrics(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """Gaps add exactly the skipped frames; seq going back is one restart and no drop; seq 0 then flows."""
    url = fake_url()
    p = Publisher(*pubs())
    register(stub, url, [f"tcp://127.0.0.1:{p.port}"])
    p.join(lambda: rank(stub, url).frames_received > 0)
    start = rank(stub, url)
    before = frame_counters(plane)

    def sent(seq: int, running: int) -> None:
        p.seq = seq
        p.send(running=running)
        until(lambda: rank(stub, url).seq == seq and rank(stub, url).num_running_reqs == running)

    base = start.seq
    sent(base + 1, 1)  # in order
    sent(base + 5, 2)  # 3 lost
    sent(base + 6, 3)
    sent(base + 106, 4)  # 99 lost
    r = rank(stub, url)
    assert (r.dropped_frames, r.publisher_restarts) == (start.dropped_frames + 102, start.publisher_restarts)
    sent(0, 5)  # the publisher restarted
    sent(1, 6)
    sent(2, 7)
    r = rank(stub, url)
    assert (r.dropped_frames, r.publisher_restarts) == (
        start.dropped_frames + 102,
        start.publisher_restarts + 1,
    )
    sent(1, 8)  # back again (a second restart), then a gap after it
    sent(4, 9)
    r = rank(stub, url)
    assert (r.dropped_frames, r.publisher_restarts) == (
        start.dropped_frames + 104,
        start.publisher_restarts + 2,
    )
    assert r.frames_received == start.frames_received + 9 and r.freshness == pb.FRESHNESS_FRESH
    after = frame_counters(plane)
    # The control plane's frame counters tell the same story (no other publisher is active now).
    assert after["dropped"] - before["dropped"] == 104
    assert after["gap"] - before["gap"] == 3
    assert after["restart"] - before["restart"] == 2
    assert after["ok"] - before["ok"] == 4
    assert after["malformed"] == before["malformed"]
    deregister(stub, url)


def test_a_burst_of_frames_is_accounted_exactly(stub: load_pb2_grpc.LoadServiceStub) -> None:
    """5000 frames sent back to back (a deep send queue, so none is lost): every one counted, none dropped."""
    url = fake_url()
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100_000)  # before bind: a connection's queue takes it when accepted
    try:
        p = Publisher(sock, sock.bind_to_random_port("tcp://127.0.0.1"))
        register(stub, url, [f"tcp://127.0.0.1:{p.port}"])
        p.join(lambda: rank(stub, url).frames_received > 0)
        start = rank(stub, url)
        p.seq = start.seq + 1
        for i in range(5000):
            # Values of every size class, so message lengths vary and reads split them anywhere.
            p.send(running=i, waiting=i * 37 % 1000, tokens=i * 100_003, capacity=2**40)
        until(lambda: rank(stub, url).seq == start.seq + 5000)
        r = rank(stub, url)
        assert r.frames_received == start.frames_received + 5000
        assert (r.dropped_frames, r.malformed_frames, r.publisher_restarts) == (0, 0, 0)
        assert (r.num_running_reqs, r.num_tokens, r.max_total_num_tokens) == (4999, 4999 * 100_003, 2**40)
        deregister(stub, url)
    finally:
        sock.close(0)
