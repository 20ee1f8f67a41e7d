"""A spliced body as segments (SPEC §3.3): any byte range reads as the joined bytes, and the h2c
codec frames it across segment boundaries so the peer receives exactly ``bytes(body)``."""

from __future__ import annotations

import itertools

import h2.config
import h2.connection
import h2.events
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.router.body import SplicedBody, body_segments, body_window
from dataplane.router.upstream.h2c.codec import ClientCodec
from tests.fakes.codec_listener import Recorder


@st.composite
def spliced(draw: st.DrawFn, repeat: int = 1) -> tuple[bytes, SplicedBody]:
    """A body cut at arbitrary points (empty segments included), views and bytes mixed."""
    whole = draw(st.binary(max_size=3000)) * draw(st.integers(1, repeat))
    cuts = sorted(draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    view = memoryview(whole)
    segments = [
        view[a:b] if draw(st.booleans()) else whole[a:b]
        for a, b in itertools.pairwise([0, *cuts, len(whole)])
    ]
    return whole, SplicedBody(segments)


@settings(max_examples=300, deadline=None)
@given(spliced(), st.integers(0, 3100), st.integers(0, 3100))
def test_any_window_reads_the_joined_bytes(case: tuple[bytes, SplicedBody], a: int, b: int) -> None:
    """Every range of a spliced body reads exactly as the same range of the joined body."""
    whole, body = case
    start, stop = min(a, b, len(whole)), min(max(a, b), len(whole))
    assert len(body) == len(whole) and bytes(body) == whole
    assert bytes(body.window(start, stop)) == whole[start:stop]
    assert bytes(body_window(body, start, stop)) == whole[start:stop]
    assert bytes(body_window(whole, start, stop)) == whole[start:stop]


def test_a_window_inside_one_segment_is_a_view() -> None:
    """A range inside one client segment is a view of the client's bytes, not a copy."""
    client = b"x" * 1000
    view = memoryview(client)
    body = SplicedBody((view[:600], b',"n":1', view[600:]))
    inside = body.window(10, 500)
    assert isinstance(inside, memoryview) and inside.obj is client
    assert bytes(body.window(590, 610)) == client[590:600] + b',"n":1' + client[600:604]
    assert body_window(client, 0, 1000) is client  # a whole plain body is itself
    assert body_segments(client) == (client,)
    assert body_segments(body) == body.segments


def _server() -> tuple[ClientCodec, h2.connection.H2Connection]:
    codec = ClientCodec(Recorder(), stream_window=1 << 20)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(codec.preface())
    codec.feed(server.data_to_send())
    server.receive_data(codec.take_output())  # SETTINGS ACK
    return codec, server


@settings(max_examples=150, deadline=None)
@given(spliced(repeat=40), st.lists(st.integers(1, 40000), min_size=1, max_size=8))
def test_h2_data_frames_across_segments_arrive_exactly(
    case: tuple[bytes, SplicedBody], steps: list[int]
) -> None:
    """Sent in arbitrary steps (frames straddling segment boundaries), a spliced body reaches an
    h2 server byte for byte and matches its content-length."""
    whole, body = case
    codec, server = _server()
    sid, block = codec.open_stream(b"POST", b"/", b"h:1", [], not whole, len(whole) if whole else None)
    events = [] if whole else list(server.receive_data(block))
    off = 0
    for step in itertools.cycle(steps):
        if off == len(whole):
            break
        n = min(step, codec.sendable(sid), len(whole) - off)
        assert n > 0
        prefix = block if off == 0 else b""  # HEADERS and the first DATA frames in one write
        got = server.receive_data(codec.data(sid, body, off, off + n, off + n == len(whole), prefix))
        for event in got:
            if isinstance(event, h2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, sid)
        codec.feed(server.data_to_send())
        events += got
        off += n
    received = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert received == whole
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)
