"""HTTP/2 frame floods and oversized frames against a real router (SPEC §5: h2c on the one port).

Each flood runs on its own connection and must be cut off with GOAWAY(ENHANCE_YOUR_CALM) within
a bounded number of frames (Envoy's flood limits are the model, ``dataplane.http.h2_guard``),
while a client on another connection keeps getting its answers.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from tests.fakes.bystander import Bystander
from tests.fakes.process_tree import rss_bytes
from tests.fakes.raw_h2 import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    HEADERS,
    PING,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    RawH2,
    frame,
    frame_header,
    request_headers,
)
from tests.fakes.router import RouterProcess

FLOOD = 1_000_000  # frames a flooder tries to send
# The control-frame budget (h2_max_control_frames) plus its refill over a slow test (100/s).
CONTROL_BOUND = 1000 + 100 * 30


@pytest.fixture(scope="module")
def router() -> Iterator[RouterProcess]:
    """A router with no workers: it answers GET /health itself, which is all a bystander needs."""
    with RouterProcess() as r:
        yield r


def _cut_off(conn: RawH2, code: int = ENHANCE_YOUR_CALM) -> None:
    assert conn.closed.wait(10), "the server kept the flooding connection open"
    assert conn.goaway_code() == code


def _flood(router: RouterProcess, setup: bytes, one: bytes) -> tuple[RawH2, int, Bystander]:
    with Bystander(router.port) as bystander:
        time.sleep(0.1)
        conn = RawH2(router.port)
        conn.send(setup)
        sent = conn.flood(one, FLOOD)
        _cut_off(conn)
        time.sleep(0.2)
    conn.close()
    assert sent < FLOOD  # cut off long before the flood was through
    assert bystander.statuses and set(bystander.statuses) == {200}, bystander.errors
    assert max(bystander.latencies) < 2.0, max(bystander.latencies)
    return conn, sent, bystander


def test_ping_flood_is_cut_off(router: RouterProcess) -> None:
    """A PING flood gets GOAWAY(ENHANCE_YOUR_CALM) after at most the control budget of PING acks."""
    conn, _, _ = _flood(router, b"", frame(PING, 0, 0, b"12345678"))
    assert conn.count(PING, ACK) <= CONTROL_BOUND


def test_settings_flood_is_cut_off(router: RouterProcess) -> None:
    """SETTINGS frames (each one acked) and SETTINGS acks nobody asked for are both cut off."""
    conn, _, _ = _flood(router, b"", frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100)))
    assert conn.count(SETTINGS, ACK) <= CONTROL_BOUND
    _flood(router, b"", frame(SETTINGS, ACK, 0))


def test_empty_data_flood_is_cut_off(router: RouterProcess) -> None:
    """Empty DATA frames without END_STREAM on an open request: cut off after the second one."""
    opened = frame(HEADERS, END_HEADERS, 1, request_headers("/v1/chat/completions", "POST"))
    _flood(router, opened, frame(DATA, 0, 1))


def test_empty_continuation_flood_is_cut_off(router: RouterProcess) -> None:
    """A header block continued by empty CONTINUATION frames is cut off (CVE-2024-27316's kind)."""
    opened = frame(HEADERS, 0, 1, request_headers())
    _flood(router, opened, frame(CONTINUATION, 0, 1))


def test_window_update_flood_is_cut_off(router: RouterProcess) -> None:
    """WINDOW_UPDATE frames with no DATA sent to earn them are cut off."""
    _flood(router, b"", frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)))


def test_priority_flood_is_cut_off(router: RouterProcess) -> None:
    """PRIORITY frames (on idle streams, which h2 accepts) are cut off past 100 per stream."""
    _flood(router, b"", frame(PRIORITY, 0, 3, struct.pack(">IB", 0, 16)))


def test_rst_stream_flood_on_a_closed_stream_is_cut_off(router: RouterProcess) -> None:
    """RST_STREAM frames for a stream already answered (h2 ignores them) are cut off."""
    answered = frame(HEADERS, END_HEADERS | 0x1, 1, request_headers())
    _flood(router, answered, frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))


def test_unknown_frame_type_flood_is_cut_off(router: RouterProcess) -> None:
    """Frames of a type h2 ignores (RFC 9113 §5.5) still spend the control budget."""
    _flood(router, b"", frame(0x20, 0, 0, b"x"))


def test_oversized_frame_headers_hold_no_memory(router: RouterProcess) -> None:
    """20 connections each announcing a 2^24-1 byte DATA frame and sending its payload: every one
    gets GOAWAY(FRAME_SIZE_ERROR) at the header, and the router's RSS grows by less than 30 MB
    (before: +305 MB, h2 buffered each payload before checking its length)."""
    before = rss_bytes(router.pid)
    peak = before
    opened = frame(HEADERS, END_HEADERS, 1, request_headers("/v1/chat/completions", "POST"))
    conns = [RawH2(router.port) for _ in range(20)]
    payload = b"\0" * (1 << 20)
    with Bystander(router.port) as bystander:
        for conn in conns:
            conn.send(opened + frame_header(DATA, 0, 1, (1 << 24) - 1))
        for _ in range(16):
            for conn in conns:
                conn.send(payload)
            peak = max(peak, rss_bytes(router.pid))
        for conn in conns:
            _cut_off(conn, FRAME_SIZE_ERROR)
            conn.close()
    assert peak - before < 30 * 1024 * 1024, (before, peak)
    assert bystander.statuses and set(bystander.statuses) == {200}, bystander.errors
