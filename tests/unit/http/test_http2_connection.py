"""``Http2Connection`` fed raw frames in memory: when answers are written, when read deadlines start."""

from __future__ import annotations

import asyncio
from typing import Any

import hpack

from dataplane.http.context import ServerContext
from dataplane.http.h2_frames import DATA, HEADERS, PREFACE, SETTINGS, frame
from dataplane.http.http2 import Http2Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import DEFERRED, Deferred, Request, Responder
from tests.fakes.transport import RecordingTransport

REQUEST = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"t"), (b":path", b"/x")]
END_STREAM, END_HEADERS = 0x1, 0x4


def _headers(sid: int, end_stream: bool) -> bytes:
    return frame(
        HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, hpack.Encoder().encode(REQUEST)
    )


def _statuses(data: bytes) -> dict[int, int]:
    """:status of every HEADERS frame in ``data``, by stream."""
    decoder = hpack.Decoder()
    found = {}
    at = 0
    while at + 9 <= len(data):
        n = int.from_bytes(data[at : at + 3], "big")
        sid = int.from_bytes(data[at + 5 : at + 9], "big")
        if data[at + 3] == HEADERS:
            found[sid] = int(dict(decoder.decode(data[at + 9 : at + 9 + n], raw=True))[b":status"])
        at += 9 + n
    return found


def _connection(handler: Any, **limits: Any) -> tuple[Http2Connection, RecordingTransport]:
    conn = Http2Connection(ServerContext(handler, ServerLimits(**limits), asyncio.get_running_loop()))
    transport = RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(PREFACE + frame(SETTINGS, 0, 0))
    transport.writes.clear()
    return conn, transport


def _holding() -> tuple[Http2Connection, RecordingTransport, list[Responder]]:
    """A connection whose handler answers nothing itself: the test answers through ``held``."""
    held: list[Responder] = []

    def hold(request: Request, responder: Responder) -> Deferred:
        held.append(responder)
        return DEFERRED

    conn, transport = _connection(hold)
    return conn, transport, held


async def test_a_later_answer_leaves_at_once_unless_another_stream_is_open() -> None:
    """An answer given outside ``data_received`` is written at once while no other stream is
    open; with others open it waits for the loop turn, and the answers given meanwhile share
    one write."""
    conn, transport, held = _holding()
    conn.data_received(_headers(1, True))
    held[0].respond(200, [], b"one")
    assert len(transport.writes) == 1 and _statuses(transport.writes[0]) == {1: 200}
    conn.data_received(_headers(3, True) + _headers(5, True) + _headers(7, True))
    transport.writes.clear()
    held[1].respond(201, [], b"three")
    held[2].respond(202, [], b"five")
    assert transport.writes == []  # stream 7 is still open: they wait for the loop turn
    await asyncio.sleep(0)
    assert len(transport.writes) == 1 and _statuses(transport.writes[0]) == {3: 201, 5: 202}
    held[3].respond(203, [], b"seven")  # the last open stream: at once
    assert len(transport.writes) == 2 and _statuses(transport.writes[1]) == {7: 203}


async def test_a_streamed_answer_is_written_per_chunk_while_its_stream_is_alone() -> None:
    """start/write/end on the only open stream: each part is written when given."""
    conn, transport, held = _holding()
    conn.data_received(_headers(1, True))
    held[0].start(200, [])
    assert len(transport.writes) == 1
    await held[0].write(b"chunk")
    assert len(transport.writes) == 2 and transport.writes[1][9:] == b"chunk"
    held[0].end()
    assert len(transport.writes) == 3 and transport.writes[2][3:5] == bytes((DATA, END_STREAM))


async def test_read_deadlines_start_with_the_read_that_began_the_request() -> None:
    """Streams whose body is still arriving at the end of a read get ``read_timeout_s`` from that
    read (one or several in a read), a request completed in the same read never times out, and
    nothing times out before its deadline."""

    def answer(request: Request, responder: Responder) -> None:
        responder.respond(200, [], request.body)

    conn, transport = _connection(answer, read_timeout_s=10.0)
    loop = asyncio.get_running_loop()
    before = loop.time()
    conn.data_received(_headers(1, False) + _headers(3, False) + frame(DATA, END_STREAM, 3, b"ok"))
    conn.data_received(_headers(5, False))
    after = loop.time()
    assert _statuses(bytes(transport.out)) == {3: 200}
    conn.check_timeouts(before + 9.999)
    assert _statuses(bytes(transport.out)) == {3: 200}
    conn.check_timeouts(after + 10.001)
    assert _statuses(bytes(transport.out)) == {3: 200, 1: 408, 5: 408}


async def test_repeated_and_alternating_blocks_reach_the_handler_as_sent() -> None:
    """Header blocks a client repeats (checked once, cached) still give each request its own
    method, path and headers; a handler changing its request's headers changes no later one."""
    seen: list[tuple[bytes, bytes, list[tuple[bytes, bytes]]]] = []

    def record(request: Request, responder: Responder) -> None:
        seen.append((request.method, request.path, list(request.headers)))
        request.headers.append((b"x-added", b"by the handler"))
        responder.respond(200, [], b"")

    conn, _ = _connection(record)
    encoder = hpack.Encoder()
    paths = [b"/a", b"/b", b"/a", b"/a", b"/b"]
    for i, path in enumerate(paths):
        fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"t"), (b":path", path)]
        conn.data_received(frame(HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, encoder.encode(fields)))
    assert seen == [(b"GET", path, [(b"host", b"t")]) for path in paths]
