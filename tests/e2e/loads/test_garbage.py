"""Garbage on a load publisher's socket (SPEC §7): counted as malformed, never fatal.

The malformed cases of ``tests/e2e/loads/test_load_service.py`` (short seq, two parts, not
msgpack, wrong tag, a negative count, a string count, a map, a negative seq) are not repeated.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import msgspec
import pytest

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
    stat,
    until,
)


def seq8(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def tagged(*fields: object) -> bytes:
    return msgspec.msgpack.encode(["LoadStat", *fields])


GOOD = stat(1, 2, 3, 4, 0)
# name -> the parts of one message (its seq is 1: never ahead of the good frames around it)
MALFORMED = {
    "one frame": [b"load"],
    "four frames": [b"load", seq8(1), GOOD, b"extra"],
    "forty frames": [b"load", seq8(1), GOOD, *[b"x"] * 37],
    "topic with a suffix (a SUB prefix match)": [b"loadX", seq8(1), GOOD],
    "nine-byte seq": [b"load", b"\x00" + seq8(1), GOOD],
    "empty seq": [b"load", b"", GOOD],
    "empty payload": [b"load", seq8(1), b""],
    "truncated msgpack": [b"load", seq8(1), GOOD[:-2]],
    "msgpack with trailing bytes": [b"load", seq8(1), GOOD + b"\x00"],
    "float count": [b"load", seq8(1), tagged(1.0, 2, 3, 4, 0)],
    "fractional count": [b"load", seq8(1), tagged(1, 2.5, 3, 4, 0)],
    "bool count": [b"load", seq8(1), tagged(True, 2, 3, 4, 0)],
    "nil count": [b"load", seq8(1), tagged(1, 2, None, 4, 0)],
    "2**64-1 count": [b"load", seq8(1), tagged(1, 2, 3, 2**64 - 1, 0)],
    "2**63 count": [b"load", seq8(1), tagged(2**63, 2, 3, 4, 0)],
    "string dp rank": [b"load", seq8(1), tagged(1, 2, 3, 4, "0")],
    "float dp rank": [b"load", seq8(1), tagged(1, 2, 3, 4, 0.0)],
    "no fields": [b"load", seq8(1), tagged()],
    "untagged array": [b"load", seq8(1), msgspec.msgpack.encode([1, 2, 3, 4, 0])],
    "lower-case tag": [b"load", seq8(1), msgspec.msgpack.encode(["loadstat", 1, 2, 3, 4, 0])],
    "an integer": [b"load", seq8(1), msgspec.msgpack.encode(7)],
    "nil": [b"load", seq8(1), msgspec.msgpack.encode(None)],
    "seq -2**63": [b"load", seq8(-(2**63)), GOOD],
}


@pytest.fixture
def publisher(stub: load_pb2_grpc.LoadServiceStub, pubs) -> Iterator[Publisher]:  # type: ignore[no-untyped-def]
    """A registered one-rank worker whose SUB has joined (a first frame went through)."""
    p = Publisher(*pubs())
    p.url = fake_url()
    register(stub, p.url, [f"tcp://127.0.0.1:{p.port}"])
    p.join(lambda: rank(stub, p.url).frames_received > 0)
    yield p
    deregister(stub, p.url)


def test_each_malformed_shape_is_counted_once_and_changes_nothing(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher
) -> None:
    """Every malformed message adds one to the rank's malformed count and to the metric; values stay."""
    url = publisher.url
    publisher.send(running=5, waiting=6, tokens=7, capacity=8)
    until(lambda: rank(stub, url).num_running_reqs == 5)
    for name, parts in MALFORMED.items():
        before, counters = rank(stub, url), frame_counters(plane)
        publisher.send_raw(parts)
        try:
            until(lambda b=before: rank(stub, url).malformed_frames > b.malformed_frames, timeout_s=5)
        except AssertionError:
            pytest.fail(f"{name}: not counted as malformed")
        after = rank(stub, url)
        assert after.malformed_frames == before.malformed_frames + 1, name
        assert frame_counters(plane)["malformed"] == counters["malformed"] + 1, name
        assert (after.seq, after.frames_received, after.num_running_reqs, after.max_total_num_tokens) == (
            before.seq,
            before.frames_received,
            5,
            8,
        ), name
    # And good frames still flow, without a drop or a restart counted for the garbage.
    publisher.send(running=9)
    until(lambda: rank(stub, url).num_running_reqs == 9)
    r = rank(stub, url)
    assert (r.dropped_frames, r.publisher_restarts, r.malformed_frames) == (0, 0, len(MALFORMED))
    assert r.freshness == pb.FRESHNESS_FRESH


ACCEPTED = {
    "several trailing elements": (tagged(1, 2, 3, 4, 0, "x", [1, 2], {"k": 1}, None), (1, 2, 3, 4)),
    "nil dp rank": (tagged(2, 0, 0, 0, None), (2, 0, 0, 0)),
    # SGLang's LoadStat declares attn_dp_rank with a default (None): its decoder takes four fields.
    "no dp rank at all": (tagged(5, 1, 1, 1), (5, 1, 1, 1)),
    "a dp rank that is not the endpoint's": (tagged(3, 1, 1, 1, 7), (3, 1, 1, 1)),
    "zero everywhere": (tagged(0, 0, 0, 0, 0), (0, 0, 0, 0)),
    # Valid msgpack with wider integer encodings than msgspec would choose (uint64, int32).
    "wide integer encodings": (
        b"\x96\xa8LoadStat"
        + b"\xcf"
        + struct.pack(">Q", 4)
        + b"\xd2"
        + struct.pack(">i", 5)
        + b"\xcd\x01\x00"
        + b"\xce\x00\x01\x00\x00"
        + b"\xc0",
        (4, 5, 256, 65536),
    ),
    "str8-encoded tag": (b"\x96\xd9\x08LoadStat\x01\x02\x03\x04\x00", (1, 2, 3, 4)),
    "large but plausible counts": (tagged(10**6, 10**6, 10**12, 10**12, 0), (10**6, 10**6, 10**12, 10**12)),
}


def test_valid_variants_are_accepted(stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher) -> None:
    """Extra trailing elements, nil/odd dp ranks and non-minimal msgpack encodings are valid frames (SPEC §7)."""
    url = publisher.url
    for name, (payload, values) in ACCEPTED.items():
        seq = publisher.seq
        publisher.seq += 1
        publisher.send_raw([b"load", seq8(seq), payload])
        until(lambda seq=seq: rank(stub, url).seq == seq, timeout_s=5)
        r = rank(stub, url)
        assert (r.num_running_reqs, r.num_waiting_reqs, r.num_tokens, r.max_total_num_tokens) == values, name
    assert rank(stub, url).malformed_frames == 0


def test_a_malformed_frame_in_sequence_is_not_also_a_dropped_frame(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher
) -> None:
    """A garbage frame that took its seq was received, not lost: malformed +1, dropped +0."""
    url = publisher.url
    first = publisher.send(running=1)
    publisher.send_raw([b"load", seq8(first + 1), b"\xc1"])
    publisher.send_raw([b"load", seq8(first + 2), tagged("x", 0, 0, 0, 0)])
    publisher.seq = first + 3
    publisher.send(running=2)
    until(lambda: rank(stub, url).seq == first + 3)
    r = rank(stub, url)
    assert (r.malformed_frames, r.dropped_frames) == (2, 0)
    publisher.seq = first + 10  # a real gap after it still counts
    publisher.send(running=3)
    until(lambda: rank(stub, url).seq == first + 10)
    assert rank(stub, url).dropped_frames == 6


@pytest.mark.parametrize("size", [1 << 20, 3 << 20])
def test_a_huge_frame_is_malformed_and_the_next_frame_flows(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher, size: int
) -> None:
    """A MiB-sized payload is counted as malformed; the good frame right behind it arrives."""
    url = publisher.url
    before = rank(stub, url)
    publisher.send_raw([b"load", seq8(before.seq), b"\x92" + b"\x00" * size])
    publisher.seq = before.seq + 1
    publisher.send(running=4)
    until(lambda: rank(stub, url).seq == before.seq + 1, timeout_s=10)
    r = rank(stub, url)
    assert (r.malformed_frames, r.num_running_reqs, r.dropped_frames) == (before.malformed_frames + 1, 4, 0)


def test_an_8_mib_frame_is_counted_as_malformed(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher
) -> None:
    """An 8 MiB frame is garbage like any other: the operator sees it in the malformed count."""
    url = publisher.url
    before = rank(stub, url)
    publisher.send_raw([b"load", seq8(before.seq), b"\x00" * (8 << 20)])
    publisher.join(lambda: rank(stub, url).seq > before.seq + 1, running=6)
    assert rank(stub, url).malformed_frames == before.malformed_frames + 1


def test_a_1_mib_frame_does_not_hold_up_the_next_frame_in_a_busy_fleet(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher, pubs, watch
) -> None:  # type: ignore[no-untyped-def]
    """While other workers publish, a watcher sees the good frame behind a 1 MiB garbage frame at once, never STALE."""
    busy = Publisher(*pubs())
    busy.url = fake_url()
    register(stub, busy.url, [f"tcp://127.0.0.1:{busy.port}"])
    busy.join(lambda: rank(stub, busy.url).frames_received > 0)
    url = publisher.url
    watcher = watch()
    until(lambda: len(watcher.messages) >= 1)
    publisher.send(running=1)
    publisher.send_raw([b"load", seq8(publisher.seq), b"\x00" * (1 << 20)])
    publisher.seq += 1
    publisher.send(running=4)
    sent_at = time.monotonic()
    # The fleet goes on publishing (every push interval has changes): only the watcher reads.
    while time.monotonic() - sent_at < 3 and not any(w.num_running_reqs == 4 for w in watcher.workers(url)):
        busy.send()
        time.sleep(0.01)
    pushed = watcher.workers(url)
    assert any(w.num_running_reqs == 4 for w in pushed), "the frame behind the garbage never showed"
    assert not any(w.freshness == pb.FRESHNESS_STALE for w in pushed)
    arrived = next(
        t for t, m in watcher.messages for w in m.workers if w.url == url and w.num_running_reqs == 4
    )
    assert arrived - sent_at < STALE_AFTER_S
    deregister(stub, busy.url)


def test_a_sizeable_trailing_element_is_still_accepted(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher
) -> None:
    """Extra trailing elements are accepted (SPEC §7) whatever they hold: a later field of a few KiB too."""
    url = publisher.url
    for extra in (b"x" * 300, b"y" * 4000, list(range(2000))):
        seq = publisher.seq
        publisher.seq += 1
        publisher.send_raw([b"load", seq8(seq), tagged(6, 1, 2, 3, 0, extra)])
        until(lambda seq=seq: rank(stub, url).seq == seq, timeout_s=5)
    r = rank(stub, url)
    assert (r.num_running_reqs, r.malformed_frames) == (6, 0)


def test_deeply_nested_msgpack_is_malformed_and_watchers_keep_getting_pushes(
    stub: load_pb2_grpc.LoadServiceStub, publisher: Publisher, pubs, watch
) -> None:  # type: ignore[no-untyped-def]
    """A 1 KiB payload of nested arrays after the fields (Python's recursion limit) is one malformed frame, not a dead hub."""
    other = Publisher(*pubs())
    other.url = fake_url()
    register(stub, other.url, [f"tcp://127.0.0.1:{other.port}"])
    other.join(lambda: rank(stub, other.url).frames_received > 0)
    watcher = watch()
    until(lambda: len(watcher.messages) >= 1)
    url = publisher.url
    before = rank(stub, url)
    header = tagged(1, 2, 3, 4, 0)
    deep = bytes([header[0] + 1]) + header[1:] + b"\x91" * (1023 - len(header)) + b"\x00"
    assert len(deep) == 1024
    publisher.send_raw([b"load", seq8(publisher.seq), deep])
    publisher.seq += 1
    until(lambda: rank(stub, url).malformed_frames == before.malformed_frames + 1, timeout_s=5)
    other.send(running=77)
    until(lambda: any(w.num_running_reqs == 77 for w in watcher.workers(other.url)), timeout_s=5)
    publisher.send(running=78)
    until(lambda: any(w.num_running_reqs == 78 for w in watcher.workers(url)), timeout_s=5)
    deregister(stub, other.url)
