"""SGLang 0.5.23's real SchedulerLoadPublisher, on a real ZMQ socket, against our codec and publisher."""

from __future__ import annotations

import pytest

from controlplane.load.wire import LoadStat, decode_frame
from dataplane.engine.publisher import LoadPublisher
from tests.fakes import sglang_engine as engine
from tests.fakes.sglang_engine.load_publisher import GOLDEN_SGLANG_0_5_23, SNAPSHOT, Snapshot, capture

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)

STAT = LoadStat(3, 2, 1500, 262144, 0, 700, 2200, 256, 123456, 78901)


class _Socket:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, bytes]] = []

    def send_multipart(self, msg_parts: tuple[bytes, bytes, bytes], flags: int = 0) -> None:
        self.sent.append(msg_parts)

    def close(self, linger: int | None = None) -> None:
        pass


def test_the_golden_frame_is_what_sglang_sends() -> None:
    """The pinned 11-position bytes are those SGLang 0.5.23's publisher puts on the wire, seq 0 first."""
    frames = capture([SNAPSHOT])
    assert frames == [[b"load", bytes(8), GOLDEN_SGLANG_0_5_23]]
    assert decode_frame(frames[0]) == (0, STAT)


def test_our_publisher_sends_sglangs_bytes() -> None:
    """engine-side LoadPublisher with the same nine counts sends byte for byte SGLang's frame."""
    sock = _Socket()
    publisher = LoadPublisher(sock, attn_dp_rank=0)
    counts = (3, 2, 1500, 262144, 700, 2200, 256, 123456, 78901)
    assert publisher.publish(lambda: counts, force=True)
    assert [list(f) for f in sock.sent] == capture([SNAPSHOT])


def test_sglang_dedups_on_all_nine_counts() -> None:
    """An unchanged snapshot is not resent within the heartbeat; a change in any appended count is."""
    changed = Snapshot(3, 2, 1500, 262144, 700, 2200, 256, 123456, 78902)
    frames = capture([SNAPSHOT, SNAPSHOT, changed])
    assert [int.from_bytes(f[1], "big") for f in frames] == [0, 1]
    assert decode_frame(frames[1])[1].total_prefill_busy_us == 78902
    sock = _Socket()
    publisher = LoadPublisher(sock, attn_dp_rank=0)
    for counts in ((3, 2, 1500, 262144, 700, 2200, 256, 123456, 78901),) * 2 + (
        (3, 2, 1500, 262144, 700, 2200, 256, 123456, 78902),
    ):
        publisher.publish(lambda counts=counts: counts, force=True)
    assert [list(f) for f in sock.sent] == frames


def test_sglang_throttles_unforced_calls_to_its_interval() -> None:
    """Unforced, 0.5.23 reads the snapshot on every publish_interval-th call only."""
    snapshots = [Snapshot(i, 0, 0, 100, 0, 0, 8, 0, 0) for i in range(1, 31)]
    frames = capture(snapshots, publish_interval=15, force=False)
    assert [decode_frame(f)[1].num_running_reqs for f in frames] == [15, 30]
