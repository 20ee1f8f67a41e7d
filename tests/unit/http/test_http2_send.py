"""The h2 responder's synchronous streaming calls (``start_sending``, ``send``, ``send_last``,
``writable``: what the router's callback relay uses): exactly the frames of ``start``/``write``/
``end``, one write per call, and flow control (RFC 9113 §5.2) that holds the producer back."""

from __future__ import annotations

import asyncio
from typing import Any

import hpack
import pytest

from dataplane.http.context import ServerContext
from dataplane.http.h2_frames import (
    DATA,
    HEADERS,
    INTERNAL_ERROR,
    PREFACE,
    RST_STREAM,
    S_INITIAL_WINDOW_SIZE,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)
from dataplane.http.h2_server_codec import encode_response
from dataplane.http.http2 import Http2Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import DEFERRED, ClientDisconnected, Deferred, Request, Responder
from tests.fakes.transport import RecordingTransport

SSE = [(b"content-type", b"text/event-stream")]
END_STREAM, END_HEADERS = 0x1, 0x4


def _request(sid: int, method: bytes = b"POST") -> bytes:
    fields = [(b":method", method), (b":scheme", b"http"), (b":authority", b"t"), (b":path", b"/s")]
    return frame(HEADERS, END_HEADERS | END_STREAM, sid, hpack.Encoder().encode(fields))


def _serve(window: int = 65535, **limits: Any) -> tuple[Http2Connection, RecordingTransport, list[Responder]]:
    held: list[Responder] = []

    def hold(request: Request, responder: Responder) -> Deferred:
        held.append(responder)
        return DEFERRED

    conn = Http2Connection(ServerContext(hold, ServerLimits(**limits), asyncio.get_running_loop()))
    transport = RecordingTransport()
    conn.connection_made(transport)
    settings = S_INITIAL_WINDOW_SIZE.to_bytes(2, "big") + window.to_bytes(4, "big")
    conn.data_received(PREFACE + frame(SETTINGS, 0, 0, settings))
    transport.writes.clear()
    return conn, transport, held


def _data(writes: list[bytes], sid: int) -> tuple[bytes, bool]:
    """The DATA payloads of stream ``sid`` in ``writes``, and whether one ended the stream."""
    data = b"".join(writes)
    body, ended, at = b"", False, 0
    while at + 9 <= len(data):
        n = int.from_bytes(data[at : at + 3], "big")
        if data[at + 3] == DATA and int.from_bytes(data[at + 5 : at + 9], "big") == sid:
            body += data[at + 9 : at + 9 + n]
            ended = ended or bool(data[at + 4] & END_STREAM)
        at += 9 + n
    return body, ended


async def test_sending_from_callbacks_frames_the_answer_as_start_write_end_do() -> None:
    """HEADERS with the first DATA, each chunk, and the last chunk with END_STREAM: one write
    each, the same frames as start/write/end give."""
    conn, transport, held = _serve()
    conn.data_received(_request(1))  # one stream open at a time: its writes go out at once
    by_calls = held[0]
    assert by_calls.sends_now
    head = frame(HEADERS, END_HEADERS, 1, encode_response(200, SSE, None))
    assert by_calls.start_sending(200, SSE, b"data: 1\n\n")
    assert by_calls.send(b"data: 2\n\n")
    assert by_calls.send(b"")  # nothing to send, nothing written
    by_calls.send_last(b"data: [DONE]\n\n")
    assert transport.writes == [
        head + frame(DATA, 0, 1, b"data: 1\n\n"),
        frame(DATA, 0, 1, b"data: 2\n\n"),
        frame(DATA, END_STREAM, 1, b"data: [DONE]\n\n"),
    ]
    transport.writes.clear()
    conn.data_received(_request(3))
    by_task = held[1]
    by_task.start(200, SSE)
    await by_task.write(b"data: 1\n\n")
    await by_task.write(b"data: 2\n\n")
    await by_task.write(b"data: [DONE]\n\n")
    by_task.end()
    assert b"".join(transport.writes) == frame(
        HEADERS, END_HEADERS, 3, encode_response(200, SSE, None)
    ) + b"".join(
        (
            frame(DATA, 0, 3, b"data: 1\n\n"),
            frame(DATA, 0, 3, b"data: 2\n\n"),
            frame(DATA, 0, 3, b"data: [DONE]\n\n"),
            frame(DATA, END_STREAM, 3, b""),
        )
    )
    with pytest.raises(RuntimeError):
        by_calls.send(b"after the end")


async def test_empty_first_and_last_chunks_and_answers_without_content() -> None:
    """No first chunk: HEADERS alone; no last chunk: an empty END_STREAM DATA frame; HEAD and 204
    answers carry no content whatever is sent."""
    conn, transport, held = _serve()
    conn.data_received(_request(1))
    plain = held[0]
    assert plain.start_sending(200, SSE, b"")
    plain.send_last(b"")
    assert transport.writes == [
        frame(HEADERS, END_HEADERS, 1, encode_response(200, SSE, None)),
        frame(DATA, END_STREAM, 1, b""),
    ]
    for sid, method, status in ((3, b"HEAD", 200), (5, b"POST", 204)):
        conn.data_received(_request(sid, method))
        resp = held[-1]
        transport.writes.clear()
        assert resp.start_sending(status, SSE, b"first")
        assert resp.send(b"more")
        resp.send_last(b"last")
        assert _data(transport.writes, sid) == (b"", True)


async def test_a_client_without_credit_holds_the_producer_back_and_gets_everything_later() -> None:
    """Past ``h2_stream_buffer_bytes`` queued behind the client's window ``send`` says stop and
    ``writable`` waits for WINDOW_UPDATE; the queue never holds more than the buffer and the
    chunk that passed it; the end waits behind the data; everything arrives in order."""
    conn, transport, held = _serve(window=10, h2_stream_buffer_bytes=100)
    conn.data_received(_request(1))
    resp = held[0]
    assert resp.start_sending(200, SSE, b"a" * 50)  # 10 sent, 40 queued: within the buffer
    assert not resp.send(b"b" * 100)  # 140 queued
    assert _data(transport.writes, 1) == (b"a" * 10, False)
    waiting = asyncio.ensure_future(resp.writable())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    conn.data_received(frame(WINDOW_UPDATE, 0, 1, (50).to_bytes(4, "big")))  # 90 queued: go on
    await asyncio.wait_for(waiting, 1)
    resp.send_last(b"c")
    assert _data(transport.writes, 1) == (b"a" * 50 + b"b" * 10, False)
    conn.data_received(frame(WINDOW_UPDATE, 0, 1, (1000).to_bytes(4, "big")))
    assert _data(transport.writes, 1) == (b"a" * 50 + b"b" * 100 + b"c", True)
    assert resp.finished and not conn._streams


async def test_a_stream_without_credit_for_write_timeout_s_is_reset() -> None:
    """``writable`` on a stream the client gives no credit for ``write_timeout_s``: the stream is
    reset (RST_STREAM INTERNAL_ERROR) and the producer told the client is gone."""
    conn, transport, held = _serve(window=10, h2_stream_buffer_bytes=10, write_timeout_s=0.05)
    conn.data_received(_request(1))
    resp = held[0]
    assert not resp.start_sending(200, SSE, b"x" * 100)
    transport.writes.clear()
    with pytest.raises(ClientDisconnected):
        await asyncio.wait_for(resp.writable(), 1)
    assert transport.writes == [frame(RST_STREAM, 0, 1, INTERNAL_ERROR.to_bytes(4, "big"))]
    assert not conn._streams


async def test_a_client_resetting_the_stream_wakes_the_producer_with_client_disconnected() -> None:
    """RST_STREAM from the client while the producer waits for credit: ``writable`` raises,
    the disconnect callback runs once, and a later ``send`` raises too."""
    conn, _, held = _serve(window=10, h2_stream_buffer_bytes=10)
    conn.data_received(_request(1))
    resp = held[0]
    gone: list[int] = []
    resp.on_disconnect(lambda: gone.append(1))
    assert not resp.start_sending(200, SSE, b"x" * 100)
    waiting = asyncio.ensure_future(resp.writable())
    await asyncio.sleep(0)
    conn.data_received(frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big")))  # CANCEL
    with pytest.raises(ClientDisconnected):
        await asyncio.wait_for(waiting, 1)
    assert gone == [1]
    with pytest.raises(ClientDisconnected):
        resp.send(b"more")
    resp.send_last(b"last")  # like end(): nothing once the client is gone
