"""``FrameGuard``: frame headers read before h2 parses them (RFC 9113 §4.2 frame sizes, flood limits), exact bytes."""

from __future__ import annotations

import struct

from h2.errors import ErrorCodes

from dataplane.http.h2_guard import FrameGuard
from dataplane.http.limits import ServerLimits
from dataplane.http.wire import H2_PREFACE

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = 0, 1, 2, 3, 4, 6, 8, 9


def frame(kind: int, flags: int, stream: int, payload: bytes = b"", length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def guard(clock: Clock | None = None, data_frames: int = 0, **limits: object) -> FrameGuard:
    g = FrameGuard(ServerLimits(**limits), clock or Clock(), lambda: data_frames)  # type: ignore[arg-type]
    assert g.check(H2_PREFACE + frame(SETTINGS, 0, 0)) == 0
    return g


def test_a_frame_longer_than_our_max_frame_size_is_refused_at_its_header() -> None:
    """The header alone (no payload yet) of a frame over SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR."""
    g = guard()
    assert g.check(frame(DATA, 0, 1, length=65536)[:9] + b"x" * 100) == 0  # at the limit: fine
    g = guard()
    assert g.check(frame(DATA, 0, 1, length=(1 << 24) - 1)[:9]) == ErrorCodes.FRAME_SIZE_ERROR
    assert "16777215" in g.reason


def test_frame_boundaries_are_followed_across_reads() -> None:
    """Headers and payloads split at every byte offset are still read at their boundaries."""
    stream = b"".join(frame(DATA, 0, 1, b"a" * 100) for _ in range(3)) + frame(DATA, 0, 1, length=70000)[:9]
    for cut in range(1, len(stream)):
        g = guard()
        first = g.check(stream[:cut])
        assert first == 0 or cut == len(stream)
        assert g.check(stream[cut:]) == ErrorCodes.FRAME_SIZE_ERROR, cut


def test_empty_frames_without_end_stream_are_cut_after_the_limit() -> None:
    """Two consecutive empty DATA frames (Envoy's default of 1): ENHANCE_YOUR_CALM; an empty
    END_STREAM frame and a frame with a payload in between are fine."""
    g = guard()
    assert g.check(frame(DATA, 0, 1) + frame(DATA, 0, 1, b"x") + frame(DATA, 0, 1)) == 0
    assert g.check(frame(DATA, 1, 1)) == 0  # END_STREAM: not abusive
    assert g.check(frame(DATA, 0, 3)) == 0
    assert g.check(frame(DATA, 0, 3)) == ErrorCodes.ENHANCE_YOUR_CALM


def test_padding_alone_is_an_empty_payload() -> None:
    """A padded DATA frame whose payload is only padding counts as empty, even when its
    pad-length byte arrives in a later read."""
    padded = frame(DATA, 0x8, 1, b"\x04" + b"\0" * 4)
    g = guard()
    assert g.check(padded) == 0
    assert g.check(padded[:9]) == 0
    assert g.check(padded[9:]) == ErrorCodes.ENHANCE_YOUR_CALM


def test_empty_continuations_are_cut() -> None:
    """HEADERS then empty CONTINUATION frames: cut at the second empty frame."""
    g = guard()
    assert g.check(frame(HEADERS, 0, 1, b"\x82") + frame(CONTINUATION, 0, 1)) == 0
    assert g.check(frame(CONTINUATION, 0, 1)) == ErrorCodes.ENHANCE_YOUR_CALM


def test_priority_frames_are_allowed_per_stream_opened() -> None:
    """100 PRIORITY frames per stream opened plus 100: the next one is cut."""
    g = guard()
    prio = frame(PRIORITY, 0, 3, b"\0\0\0\0\x10")
    assert g.check(prio * 100) == 0
    assert g.check(frame(HEADERS, 0x5, 1, b"\x82")) == 0  # a new stream: 100 more
    assert g.check(prio * 100) == 0
    assert g.check(prio) == ErrorCodes.ENHANCE_YOUR_CALM


def test_streams_opened_are_counted_by_id_whatever_the_reserved_bit() -> None:
    """RFC 9113 §4.1: a HEADERS frame's stream id with the reserved bit set is the same stream;
    re-sending it opens nothing new (no more PRIORITY frames allowed)."""
    g = guard(h2_max_priority_frames_per_stream=1)
    assert g.check(frame(HEADERS, 4, 1 | 1 << 31, b"x")) == 0
    assert g.check(frame(HEADERS, 5, 1, b"x")) == 0  # the same stream: not a new one
    assert g.check(frame(PRIORITY, 0, 1, b"\x00" * 5) * 2) == 0  # 1 x (1 + 1 stream)
    assert g.check(frame(PRIORITY, 0, 1, b"\x00" * 5)) == ErrorCodes.ENHANCE_YOUR_CALM


def test_window_updates_are_allowed_per_data_frame_sent() -> None:
    """5 + 2 x (streams + 10 x DATA frames sent) WINDOW_UPDATE frames, then cut."""
    update = frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\1")
    g = guard(data_frames=3)
    assert g.check(update * (5 + 2 * 30)) == 0
    assert g.check(update) == ErrorCodes.ENHANCE_YOUR_CALM
    g = guard()
    assert g.check(update * 5) == 0
    assert g.check(update) == ErrorCodes.ENHANCE_YOUR_CALM


def test_control_frames_spend_a_budget_that_refills_with_time() -> None:
    """The client's SETTINGS and 999 PINGs at once pass, the next PING is cut; a PING per 10 ms
    (100/s) goes on forever."""
    ping = frame(PING, 0, 0, b"12345678")
    g = guard()
    assert g.check(ping * 999) == 0
    assert g.check(ping) == ErrorCodes.ENHANCE_YOUR_CALM
    clock = Clock()
    g = guard(clock)
    for _ in range(5000):
        clock.now += 0.01
        assert g.check(ping) == 0


def test_settings_cost_one_per_parameter() -> None:
    """A SETTINGS frame with 2000 parameters costs 2001 of the budget: cut at once."""
    g = guard()
    assert g.check(frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100) * 2000)) == ErrorCodes.ENHANCE_YOUR_CALM


def test_rst_stream_and_unknown_frames_spend_the_budget() -> None:
    """RST_STREAM and unknown frame types draw on the control budget; each opened stream adds one."""
    g = guard()
    rst = frame(RST_STREAM, 0, 1, b"\0\0\0\x08")
    # The client's SETTINGS and 999 unknown frames spend it all; the stream gives one back.
    assert g.check(frame(0x20, 0, 0, b"x") * 999 + frame(HEADERS, 0x5, 1, b"\x82")) == 0
    assert g.check(rst) == 0
    assert g.check(rst) == ErrorCodes.ENHANCE_YOUR_CALM


def test_body_data_frames_cost_nothing_but_a_header_read() -> None:
    """A 1 MiB body in 16 KiB DATA frames, with the stream's HEADERS: passes."""
    g = guard()
    body = frame(HEADERS, 0x4, 1, b"\x83") + frame(DATA, 0, 1, b"b" * 16384) * 64 + frame(DATA, 1, 1)
    assert g.check(body) == 0
