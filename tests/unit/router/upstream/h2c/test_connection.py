"""One h2c connection driven in memory (no sockets) by the ``h2`` library's server state machine."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes

from dataplane.errors import UpstreamBodyIncomplete, UpstreamUnreachable
from dataplane.router.upstream.h2c.connection import H2Connection
from dataplane.router.upstream.h2c.stream import H2Stream


class FakeTransport:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> None:
        return None

    def take(self) -> bytes:
        data = bytes(self.written)
        self.written.clear()
        return data


class Peer:
    """A connection wired to an h2 server in memory; ``pump`` moves bytes client -> server."""

    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.conn = H2Connection(b"w:1")
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.server.initiate_connection()
        self.events: list[h2.events.Event] = []

    def pump(self) -> list[h2.events.Event]:
        events = self.server.receive_data(self.transport.take())
        self.events += events
        return events

    def reply(self) -> None:
        self.conn.data_received(self.server.data_to_send())


def _start(peer: Peer, body: bytes = b"") -> H2Stream:
    stream = peer.conn.start(
        b"POST" if body else b"GET", b"/x", [], body, asyncio.get_running_loop().time() + 30
    )
    peer.pump()
    return stream


async def test_lost_before_the_peer_spoke_is_unreachable() -> None:
    """A connection that dies before any byte from the worker: nothing was processed, retryable."""
    peer = Peer()
    stream = peer.conn.start(b"GET", b"/", [], b"", asyncio.get_running_loop().time() + 30)
    peer.conn.connection_lost(ConnectionResetError())
    with pytest.raises(UpstreamUnreachable):
        await stream.response_started()


async def test_lost_after_the_peer_spoke_is_incomplete() -> None:
    """Once the worker has spoken, a lost connection may have processed the request: not retryable."""
    peer = Peer()
    stream = _start(peer)
    peer.reply()
    peer.conn.connection_lost(None)
    with pytest.raises(UpstreamBodyIncomplete):
        await stream.response_started()
    assert peer.transport.closed


async def test_refused_before_headers_is_unreachable_after_is_incomplete() -> None:
    """REFUSED_STREAM is retryable only while no response head arrived."""
    peer = Peer()
    first = _start(peer)
    second = _start(peer)
    sid1, sid2 = first.stream_id, second.stream_id
    peer.server.reset_stream(sid1, ErrorCodes.REFUSED_STREAM)
    peer.server.send_headers(sid2, [(b":status", b"200")])
    peer.server.reset_stream(sid2, ErrorCodes.REFUSED_STREAM)
    peer.reply()
    with pytest.raises(UpstreamUnreachable):
        await first.response_started()
    await second.response_started()
    with pytest.raises(UpstreamBodyIncomplete):
        async for _ in second.chunks():
            pass


async def test_goaway_with_error_fails_every_stream() -> None:
    """GOAWAY(PROTOCOL_ERROR): streams above last_stream_id retryable, the others incomplete."""
    peer = Peer()
    low = _start(peer)
    high = _start(peer)
    peer.server.close_connection(ErrorCodes.PROTOCOL_ERROR, last_stream_id=low.stream_id)
    peer.reply()
    with pytest.raises(UpstreamUnreachable):
        await high.response_started()
    with pytest.raises(UpstreamBodyIncomplete):
        await low.response_started()
    assert peer.conn.closed
    assert not peer.conn.has_capacity()


async def test_upload_waits_while_the_transport_is_paused() -> None:
    """With the transport paused no body byte is written; resume_writing sends the rest."""
    peer = Peer()
    peer.reply()  # server SETTINGS
    peer.pump()
    peer.conn.pause_writing()
    _start(peer, b"b" * 1000)
    assert not any(isinstance(e, h2.events.DataReceived) for e in peer.events)
    peer.conn.resume_writing()
    peer.pump()
    got = b"".join(e.data for e in peer.events if isinstance(e, h2.events.DataReceived))  # type: ignore[misc]
    assert got == b"b" * 1000


async def test_early_answer_stops_the_upload() -> None:
    """A worker answering before reading the whole body gets RST_STREAM(NO_ERROR); the answer stands."""
    peer = Peer()
    stream = _start(peer, b"u" * 200_000)  # beyond the server's 64 KiB window
    sid = stream.stream_id
    peer.server.send_headers(sid, [(b":status", b"413")], end_stream=True)
    peer.reply()
    await stream.response_started()
    assert stream.status == 413
    events = peer.pump()
    assert any(isinstance(e, h2.events.StreamReset) and e.error_code == ErrorCodes.NO_ERROR for e in events)
    assert stream.buffered_body() == b""
