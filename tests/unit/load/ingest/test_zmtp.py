"""ZMTP 3.0 as the ingest's SUB speaks it: greeting, READY, frame splitting, PING/ERROR."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.load.ingest.zmtp import (
    GREETING,
    GREETING_BYTES,
    FrameReader,
    ZmtpError,
    check_greeting,
    parse_ready,
    ready_command,
    subscribe_message,
)
from controlplane.load.wire import LoadStat, encode_frame

MAX = 4 * 1024 * 1024


def frame(body: bytes, *, more: bool = False, command: bool = False) -> bytes:
    """One ZMTP frame, long form when it must be."""
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


def message(parts: list[bytes]) -> bytes:
    return b"".join(frame(p, more=i < len(parts) - 1) for i, p in enumerate(parts))


def publisher_ready() -> bytes:
    return frame(b"\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB", command=True)


def test_greeting_is_zmtp_3_0_null_as_client() -> None:
    """Our greeting: signature, version 3.0, NULL mechanism, not a server, 64 bytes."""
    assert len(GREETING) == GREETING_BYTES == 64
    assert GREETING[:10] == b"\xff" + bytes(8) + b"\x7f" and GREETING[10:12] == b"\x03\x00"
    assert GREETING[12:16] == b"NULL" and GREETING[32] == 0


def test_libzmq_greeting_is_accepted() -> None:
    """A libzmq 4.3 peer's greeting (ZMTP 3.1, NULL) passes the check."""
    check_greeting(b"\xff" + bytes(8) + b"\x7f\x03\x01" + b"NULL".ljust(20, b"\x00") + bytes(32))


@pytest.mark.parametrize(
    ("greeting", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\n".ljust(64, b"x"), "signature"),
        (b"\xff" + bytes(8) + b"\x7f\x02\x00" + b"NULL".ljust(20, b"\x00") + bytes(32), "too old"),
        (b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\x00") + bytes(32), "not NULL"),
    ],
)
def test_foreign_greetings_are_refused(greeting: bytes, reason: str) -> None:
    """Not ZMTP, ZMTP 2, or a security mechanism other than NULL: refused with the reason."""
    with pytest.raises(ZmtpError, match=reason):
        check_greeting(greeting)


def test_ready_announces_a_sub_and_parses_back() -> None:
    """Our READY carries Socket-Type SUB; parse_ready reads properties case-insensitively."""
    command = ready_command()
    assert command[0] == 4 and command[1] == len(command) - 2
    with pytest.raises(ZmtpError, match="cannot publish"):
        parse_ready(command[2:])
    assert parse_ready(publisher_ready()[2:]) == {b"socket-type": b"PUB"}


def test_subscription_is_a_one_frame_message_with_0x01() -> None:
    """A ZMTP 3.0 subscription: a final frame holding 0x01 + topic."""
    assert subscribe_message(b"load") == b"\x00\x05\x01load"


def test_reader_takes_ready_then_returns_messages() -> None:
    """READY is consumed by the reader; the frames after it come out as one message."""
    reader = FrameReader(MAX)
    parts = list(encode_frame(7, LoadStat(1, 2, 3, 4, 0)))
    assert reader.feed(publisher_ready() + message(parts)) == [parts]
    assert reader.ready == {b"socket-type": b"PUB"}


@given(
    messages=st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=4), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_any_split_of_the_stream_yields_the_same_messages(
    messages: list[list[bytes]], cuts: list[int]
) -> None:
    """Property: however the TCP stream is cut into reads, the same messages come out in order."""
    stream = b"".join(message(m) for m in messages)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = FrameReader(MAX)
    out: list[list[bytes]] = []
    for start, stop in itertools.pairwise(bounds):
        out += reader.feed(stream[start:stop])
    assert out == messages


def test_a_backlog_of_load_messages_is_read_in_one_feed() -> None:
    """Hundreds of queued load messages in one read all come out, a trailing partial one later."""
    parts = [list(encode_frame(n, LoadStat(n, 0, 0, 1, 0))) for n in range(300)]
    stream = b"".join(message(p) for p in parts)
    reader = FrameReader(MAX)
    assert reader.feed(stream[:-5]) == parts[:-1]
    assert reader.feed(stream[-5:]) == parts[-1:]


def test_ping_is_answered_with_its_context() -> None:
    """A PING (heartbeat) queues a PONG echoing its context; it is not a message."""
    reader = FrameReader(MAX)
    assert reader.feed(frame(b"\x04PING\x00\x64ctx", command=True)) == []
    assert reader.replies == [frame(b"\x04PONGctx", command=True)]


def test_error_command_oversized_commands_and_reserved_flags_raise() -> None:
    """ERROR from the peer, a command over the limit or reserved flag bits end the connection."""
    with pytest.raises(ZmtpError, match="ERROR"):
        FrameReader(MAX).feed(frame(b"\x05ERROR\x04nope", command=True))
    with pytest.raises(ZmtpError, match="command of 1001 bytes exceeds 1000"):
        FrameReader(1000).feed(b"\x06" + (1001).to_bytes(8, "big"))
    with pytest.raises(ZmtpError, match="reserved"):
        FrameReader(MAX).feed(b"\x10\x00")


GOOD = [b"load", bytes(8), b"payload"]


@given(
    position=st.integers(min_value=0, max_value=2),
    size=st.integers(min_value=1001, max_value=5000),
    cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=8),
)
def test_a_frame_over_the_limit_is_skipped_and_its_message_refused(
    position: int, size: int, cuts: list[int]
) -> None:
    """Property: an oversized frame anywhere in a message refuses that message only, unbuffered.

    Good messages before and after it come out unchanged, whatever the read boundaries.
    """
    bad = list(GOOD)
    bad[position] = b"x" * size
    stream = message(GOOD) + message(bad) + message(GOOD)
    reader = FrameReader(1000)
    out: list[list[bytes]] = []
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for start, stop in itertools.pairwise(bounds):
        out += reader.feed(stream[start:stop])
        assert len(reader._buf) <= 1000 + 9  # never the oversized frame
    assert out == [GOOD, GOOD]
    assert reader.refused == [f"frame of {size} bytes exceeds 1000"]


def test_a_message_with_too_many_frames_is_refused_without_keeping_them() -> None:
    """A message of thousands of empty frames is refused once; the next one comes out."""
    reader = FrameReader(MAX, max_parts=16)
    assert reader.feed(frame(b"", more=True) * 10_000) == []
    assert len(reader._parts) == 1  # the placeholder, not ten thousand frames
    assert reader.feed(frame(b"end") + message(GOOD)) == [GOOD]
    assert reader.refused == ["message of more than 16 frames"]
