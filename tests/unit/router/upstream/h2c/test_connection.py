"""One h2c connection driven in memory (no sockets) by the ``h2`` library's server state machine."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes

from dataplane.errors import RouterError, UpstreamBodyIncomplete, UpstreamUnreachable
from dataplane.router.upstream.base import BodySink
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

    def __init__(self, stream_window_bytes: int = 4 << 20) -> None:
        self.transport = FakeTransport()
        self.conn = H2Connection(b"w:1", stream_window_bytes=stream_window_bytes)
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


class Sink(BodySink):
    """Records what a relayed stream hands on (``H2Stream.relay_to``)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, bytes]] = []
        self.error: RouterError | None = None

    def on_body(self, chunk: bytes) -> None:
        self.told.append(("body", chunk))

    def on_end(self, last: bytes) -> None:
        self.told.append(("end", last))

    def on_error(self, error: RouterError) -> None:
        self.told.append(("error", b""))
        self.error = error


def _relayed(peer: Peer, first: bytes) -> tuple[H2Stream, Sink]:
    """A stream whose head and ``first`` body bytes came, relayed to a new sink from then on."""
    stream = _start(peer)
    peer.server.send_headers(
        stream.stream_id, [(b":status", b"200"), (b"content-type", b"text/event-stream")]
    )
    peer.server.send_data(stream.stream_id, first)
    peer.reply()
    assert stream.started
    sink = Sink()
    stream.relay_to(sink)
    return stream, sink


def _window_updates(events: list[h2.events.Event], sid: int) -> int:
    """The credit the peer was given on stream ``sid``."""
    return sum(
        e.delta  # type: ignore[misc]
        for e in events
        if isinstance(e, h2.events.WindowUpdated) and e.stream_id == sid
    )


async def test_a_relayed_stream_hands_each_read_on_in_order_then_its_end() -> None:
    """A sink gets what each read brought as one piece, in order, and the end with the last
    read's bytes (one write for both); nothing is left to iterate."""
    peer = Peer()
    stream, sink = _relayed(peer, b"data: 1\n\n")
    sid = stream.stream_id
    assert sink.told == [("body", b"data: 1\n\n")]
    peer.server.send_data(sid, b"data: 2\n\n")
    peer.server.send_data(sid, b"data: 3\n\n")
    peer.reply()
    peer.server.send_data(sid, b"data: [DONE]\n\n", end_stream=True)
    peer.reply()
    assert sink.told == [
        ("body", b"data: 1\n\n"),
        ("body", b"data: 2\n\ndata: 3\n\n"),
        ("end", b"data: [DONE]\n\n"),
    ]
    assert peer.conn.active_streams == 0


async def test_a_paused_sink_holds_the_worker_back_by_its_window_then_gets_everything() -> None:
    """Paused, the stream returns no credit (RFC 9113 §5.2): the worker's window runs out and
    what it sent waits in the stream (at most the window); resumed, the sink gets it all in
    order and the worker gets its credit back, then the end."""
    window = 64 * 1024
    peer = Peer(stream_window_bytes=window)
    stream, sink = _relayed(peer, b"a" * 1000)
    sid = stream.stream_id
    stream.pause()
    sent = b""
    i = 0
    while peer.server.local_flow_control_window(sid) > 0:
        chunk = bytes([97 + i % 26]) * min(5000, peer.server.local_flow_control_window(sid))
        peer.server.send_data(sid, chunk)
        sent += chunk
        i += 1
        peer.reply()
    assert sink.told == [("body", b"a" * 1000)]  # nothing handed on while paused
    assert _window_updates(peer.pump(), sid) == 0  # and no credit: the worker is stopped
    assert peer.server.local_flow_control_window(sid) == 0
    assert len(sent) <= window
    stream.resume()
    assert sink.told == [("body", b"a" * 1000), ("body", sent)]
    assert _window_updates(peer.pump(), sid) >= len(sent)  # the worker may send again
    peer.server.send_data(sid, b"z", end_stream=True)
    peer.reply()
    assert sink.told[-1] == ("end", b"z")


async def test_the_end_reaches_a_paused_sink_with_what_was_held() -> None:
    """A stream that ends while its sink is paused hands on what it held with the end (the
    answer is complete: nothing more to hold the worker back from)."""
    peer = Peer()
    stream, sink = _relayed(peer, b"1")
    stream.pause()
    peer.server.send_data(stream.stream_id, b"2")
    peer.reply()
    peer.server.send_data(stream.stream_id, b"3", end_stream=True)
    peer.reply()
    assert sink.told == [("body", b"1"), ("end", b"23")]


@pytest.mark.parametrize("how", ["reset", "lost"])
async def test_a_worker_failing_mid_stream_hands_on_what_came_then_the_error(how: str) -> None:
    """RST_STREAM from the worker, or its connection lost: the sink gets the bytes that came,
    then one UpstreamBodyIncomplete, and nothing after it."""
    peer = Peer()
    stream, sink = _relayed(peer, b"data: 1\n\n")
    peer.server.send_data(stream.stream_id, b"data: 2\n\n")
    if how == "reset":
        peer.server.reset_stream(stream.stream_id, ErrorCodes.INTERNAL_ERROR)
        peer.reply()
    else:
        peer.reply()
        peer.conn.connection_lost(None)
    assert sink.told == [("body", b"data: 1\n\n"), ("body", b"data: 2\n\n"), ("error", b"")]
    assert isinstance(sink.error, UpstreamBodyIncomplete)
    peer.conn.connection_lost(None)
    assert len(sink.told) == 3


async def test_a_sink_aborting_resets_the_stream_and_is_told_nothing_more() -> None:
    """The sink's client left (``abort``): RST_STREAM(CANCEL) to the worker, the stream's slot
    is free, and later frames of that stream reach nobody; the connection serves on."""
    peer = Peer()
    stream, sink = _relayed(peer, b"data: 1\n\n")
    sid = stream.stream_id
    peer.server.send_data(sid, b"data: 2\n\n")  # on its way as the client leaves
    stream.abort()
    resets = [e for e in peer.pump() if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in resets] == [(sid, ErrorCodes.CANCEL)]
    assert peer.conn.active_streams == 0
    peer.reply()
    assert sink.told == [("body", b"data: 1\n\n")]
    other = _start(peer)
    peer.server.send_headers(other.stream_id, [(b":status", b"200")], end_stream=True)
    peer.reply()
    await other.response_started()
    assert other.status == 200


async def test_relayed_bytes_are_credited_a_quarter_window_at_a_time() -> None:
    """Bytes handed on return their credit in batches of a quarter of the stream's window
    (RFC 9113 §6.9): no WINDOW_UPDATE per chunk, and never less than what was taken."""
    window = 64 * 1024
    peer = Peer(stream_window_bytes=window)
    stream, sink = _relayed(peer, b"x" * 1000)
    sid = stream.stream_id
    for _ in range(14):
        peer.server.send_data(sid, b"x" * 1000)
        peer.reply()
    assert _window_updates(peer.pump(), sid) == 0  # 15,000 bytes taken: below a quarter
    peer.server.send_data(sid, b"x" * 2000)
    peer.reply()
    assert _window_updates(peer.pump(), sid) == 17_000
    assert b"".join(chunk for _, chunk in sink.told) == b"x" * 17_000
