"""The load publisher's throttle, change detection, heartbeat and failure handling (SPEC §7)."""

from __future__ import annotations

import itertools

import pytest
import structlog

from controlplane.load.wire import LoadStat, decode_frame
from dataplane.engine.endpoints import LoadPubRange
from dataplane.engine.publisher import (
    LOAD_PUBLISH_INTERVAL,
    LoadPublisher,
    PublishGate,
    create_load_publisher,
)


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, bytes]] = []
        self.fail = False
        self.closed = False

    def send_multipart(self, msg_parts: tuple[bytes, bytes, bytes], flags: int = 0) -> None:
        if self.fail:
            raise OSError("boom")
        self.sent.append(msg_parts)

    def close(self, linger: int | None = None) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(rank: int | None = 0) -> tuple[LoadPublisher, FakeSocket, Clock]:
    sock, clock = FakeSocket(), Clock()
    return LoadPublisher(sock, attn_dp_rank=rank, clock=clock), sock, clock


def calls(pub: LoadPublisher, counts: tuple[int, int, int, int], n: int) -> list[bool]:
    return [pub.publish(lambda: counts) for _ in range(n)]


def test_only_every_fifth_call_reads_the_stat() -> None:
    """Unforced calls are throttled: the provider is read on every 5th call only."""
    pub, _, _ = make()
    reads = 0

    def provider() -> tuple[int, int, int, int]:
        nonlocal reads
        reads += 1
        return (reads, 0, 0, 0)  # always changed, so every read is sent

    results = [pub.publish(provider) for _ in range(3 * LOAD_PUBLISH_INTERVAL)]
    assert reads == 3
    assert results == ([False] * 4 + [True]) * 3


def test_forced_call_bypasses_the_throttle() -> None:
    """A forced call with a changed stat is sent at once."""
    pub, sock, _ = make()
    assert pub.publish(lambda: (1, 0, 0, 0), force=True)
    assert pub.publish(lambda: (2, 0, 0, 0), force=True)
    assert len(sock.sent) == 2


def test_unchanged_stat_is_not_resent_within_a_second() -> None:
    """An unchanged stat is suppressed until the 1 s heartbeat is due."""
    pub, sock, clock = make()
    assert pub.publish(lambda: (1, 2, 3, 4), force=True)
    clock.now += 0.999
    assert not pub.publish(lambda: (1, 2, 3, 4), force=True)
    assert len(sock.sent) == 1


def test_unchanged_stat_heartbeat_after_one_second() -> None:
    """An idle scheduler re-sends its unchanged stat once per second (the heartbeat)."""
    pub, _sock, clock = make()
    sent_at: list[float] = []
    for _ in range(35 * LOAD_PUBLISH_INTERVAL):  # 3.5 s of calls, 20 ms apart
        if pub.publish(lambda: (0, 0, 0, 100)):
            sent_at.append(clock.now)
        clock.now += 0.02
    gaps = [b - a for a, b in itertools.pairwise(sent_at)]
    # Reads happen every 5th call (0.1 s apart here), so each gap is 1 s rounded up to a read.
    assert len(sent_at) in (3, 4)
    assert all(1.0 - 1e-9 <= g <= 1.1 + 1e-9 for g in gaps)


def test_changed_stat_goes_out_at_the_next_unthrottled_call() -> None:
    """A change is sent on the next read, without waiting for the heartbeat."""
    pub, sock, clock = make()
    calls(pub, (0, 0, 0, 0), 5)
    clock.now += 0.01
    assert calls(pub, (1, 0, 0, 0), 5)[-1] is True
    assert len(sock.sent) == 2


def test_frames_carry_sequence_from_zero_and_rank() -> None:
    """Each sent frame has seq 0, 1, 2… and the publisher's attn_dp_rank."""
    pub, sock, _ = make(rank=3)
    for i in range(3):
        pub.publish(lambda i=i: (i, 1, 2, 3), force=True)
    decoded = [decode_frame(f) for f in sock.sent]
    assert [seq for seq, _ in decoded] == [0, 1, 2]
    assert decoded[2][1] == LoadStat(2, 1, 2, 3, attn_dp_rank=3)


def test_failure_never_raises_and_logs_once_per_episode() -> None:
    """Send failures are swallowed, logged once per episode, and the next success logs recovery."""
    pub, sock, _ = make()
    sock.fail = True
    with structlog.testing.capture_logs() as logs:
        for i in range(4):
            assert pub.publish(lambda i=i: (i, 0, 0, 0), force=True) is False
        sock.fail = False
        assert pub.publish(lambda: (9, 0, 0, 0), force=True) is True
        sock.fail = True
        pub.publish(lambda: (10, 0, 0, 0), force=True)
    events = [e["event"] for e in logs]
    assert events.count("load publish failed; routers fall back to their in-flight load signal") == 2
    assert events.count("load publish recovered") == 1


def test_provider_error_is_swallowed() -> None:
    """A provider that raises is a failure episode, not an exception in the scheduler loop."""
    pub, sock, _ = make()

    def broken() -> tuple[int, int, int, int]:
        raise RuntimeError("scheduler state")

    assert pub.publish(broken, force=True) is False
    assert sock.sent == []


def test_failed_send_is_retried_even_if_unchanged() -> None:
    """A stat that failed to go out is not remembered as sent, so it is retried."""
    pub, sock, _ = make()
    sock.fail = True
    pub.publish(lambda: (1, 0, 0, 0), force=True)
    sock.fail = False
    assert pub.publish(lambda: (1, 0, 0, 0), force=True) is True


def test_disabled_publisher_is_a_no_op() -> None:
    """Without a socket nothing is read or sent."""
    pub = LoadPublisher.disabled()
    assert not pub.enabled
    assert pub.publish(lambda: pytest.fail("provider read"), force=True) is False  # type: ignore[no-any-return]


def test_close_closes_the_socket_and_disables() -> None:
    """close() closes the socket; later calls are no-ops."""
    pub, sock, _ = make()
    pub.close()
    assert sock.closed and not pub.enabled


@pytest.mark.parametrize("ranks", [{"pp_rank": 1}, {"attn_tp_rank": 1}, {"attn_cp_rank": 1}])
def test_non_publisher_ranks_never_bind(ranks: dict[str, int]) -> None:
    """A scheduler off pp rank 0 / attention-TP rank 0 / attention-CP rank 0 stays disabled."""
    pub = create_load_publisher(LoadPubRange("*", 1, 1), dp_rank=0, **ranks)
    assert not pub.enabled


def test_no_range_means_disabled() -> None:
    """With publishing off (no range) the publisher is disabled."""
    assert not create_load_publisher(None, dp_rank=0).enabled


def test_gate_tick_resets_after_force() -> None:
    """A forced call restarts the count of throttled calls."""
    gate = PublishGate()
    gate.tick(False)
    gate.tick(False)
    assert gate.tick(True)
    assert [gate.tick(False) for _ in range(5)] == [False] * 4 + [True]
