"""The lean h2c client codec against the ``h2`` library's server state machine, in memory (RFC 9113)."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from h2.errors import ErrorCodes
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.h2_frames import CANCEL, H2ProtocolError
from dataplane.router.upstream.h2c.codec import ClientCodec
from tests.fakes.codec_listener import Recorder


def _pair(stream_window: int = 1 << 20) -> tuple[ClientCodec, Recorder, h2.connection.H2Connection]:
    rec = Recorder()
    codec = ClientCodec(rec, stream_window=stream_window)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(codec.preface())
    codec.feed(server.data_to_send())
    server.receive_data(codec.take_output())  # SETTINGS ACK
    return codec, rec, server


_token = st.binary(min_size=1, max_size=20).map(lambda b: bytes(97 + x % 26 for x in b))


_value = st.binary(max_size=300).map(
    lambda b: bytes(33 + x % 94 for x in b)
)  # no edge whitespace (RFC 9113 §8.2.1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_token, _value), max_size=12), _token, st.binary(max_size=20000))
def test_request_arrives_exactly(headers: list[tuple[bytes, bytes]], path: bytes, body: bytes) -> None:
    """Whatever headers and body, the server decodes exactly what the codec sent."""
    codec, _, server = _pair()
    headers = [(b"x-" + n, v) for n, v in headers] + [(b"content-type", b"application/json")]
    sid, block = codec.open_stream(b"POST", b"/" + path, b"127.0.0.1:9", headers, not body)
    wire = block + (codec.data(sid, body, 0, len(body), True) if body else b"")
    events = server.receive_data(wire)
    req = next(e for e in events if isinstance(e, h2.events.RequestReceived))
    assert req.headers == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"127.0.0.1:9"),
        (b":path", b"/" + path),
        *headers,
    ]
    got = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))  # type: ignore[misc]
    assert got == body
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)


_request_st = st.tuples(
    st.sampled_from([b"POST", b"GET", b"PUT"]),
    st.sampled_from([b"/v1/chat/completions", b"/generate"]),
    st.lists(st.tuples(st.sampled_from([b"content-type", b"x-a", b"user-agent"]), _value), max_size=3),
    st.one_of(st.none(), st.integers(0, 10**12)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_request_st, min_size=1, max_size=12), st.booleans())
def test_requests_in_a_row_arrive_exactly(
    requests: list[tuple[bytes, bytes, list[tuple[bytes, bytes]], int | None]], reuse_list: bool
) -> None:
    """Requests one after another, repeated or not, arrive exactly as sent, even when the caller
    reuses and changes one header list between them (the codec keeps the last block)."""
    codec, _, server = _pair()
    shared: list[tuple[bytes, bytes]] = []
    for method, path, fields, length in requests * 2:
        if reuse_list:  # the same list object, changed in place
            shared[:] = fields
            fields = shared
        _sid, block = codec.open_stream(method, path, b"h:1", fields, True, length)
        events = server.receive_data(block)
        req = next(e for e in events if isinstance(e, h2.events.RequestReceived))
        length_field = [] if length is None else [(b"content-length", b"%d" % length)]
        assert req.headers == [
            (b":method", method),
            (b":scheme", b"http"),
            (b":authority", b"h:1"),
            (b":path", path),
            *fields,
            *length_field,
        ]


def test_request_headers_exact_bytes() -> None:
    """A POST's HEADERS frame: indexed :method and :scheme, literal fields without indexing with
    static names where there is one, content-length last (RFC 7541 §6.1, §6.2.2; RFC 9113 §4.1)."""
    codec = ClientCodec(Recorder())
    fields = [(b"content-type", b"application/json"), (b"x-a", b"1")]
    for sid in (1, 3):  # the second from the kept block
        got_sid, frame = codec.open_stream(b"POST", b"/v1", b"h:1", fields, False, 12)
        block = (
            b"\x83"  # :method POST
            + b"\x86"  # :scheme http
            + b"\x01\x03h:1"  # :authority
            + b"\x04\x03/v1"  # :path
            + b"\x0f\x10\x10application/json"  # content-type (static 31)
            + b"\x00\x03x-a\x011"  # x-a, new name
            + b"\x0f\x0d\x0212"  # content-length (static 28)
        )
        assert got_sid == sid
        assert frame == len(block).to_bytes(3, "big") + b"\x01\x04" + sid.to_bytes(4, "big") + block
        body = codec.data(sid, b"x" * 12, 0, 12, True)
        assert body == b"\x00\x00\x0c\x00\x01" + sid.to_bytes(4, "big") + b"x" * 12


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=50000), st.lists(st.integers(1, 5000), max_size=30))
def test_response_survives_any_segmentation(body: bytes, cuts: list[int]) -> None:
    """A response split at arbitrary byte boundaries decodes to the same headers and body."""
    codec, rec, server = _pair()
    sid, block = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    server.receive_data(block)
    server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/plain")])
    server.send_data(sid, body, end_stream=True)
    wire = server.data_to_send()
    pos = 0
    for cut in cuts:
        codec.feed(wire[pos : pos + cut])
        pos += cut
    codec.feed(wire[pos:])
    assert rec.headers[sid] == [(b":status", b"200"), (b"content-type", b"text/plain")]
    assert rec.data.get(sid, b"") == body
    assert sid in rec.ended


def test_upload_waits_for_the_peer_window() -> None:
    """A body beyond the peer's 64 KiB window can be sent only after its WINDOW_UPDATE."""
    codec, rec, server = _pair()
    body = b"a" * 100_000
    sid, block = codec.open_stream(b"POST", b"/", b"h:1", [], False)
    first = codec.sendable(sid)
    assert first == 65535
    server.receive_data(block + codec.data(sid, body, 0, first, False))
    assert codec.sendable(sid) == 0
    server.acknowledge_received_data(first, sid)
    codec.feed(server.data_to_send())
    assert rec.windows >= 1
    rest = len(body) - first
    assert codec.sendable(sid) >= rest
    events = server.receive_data(codec.data(sid, body, first, len(body), True))
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)


def test_credit_returned_only_as_consumed() -> None:
    """Stream credit goes back once the reader consumed a quarter of the window, not on receipt."""
    codec, _rec, server = _pair(stream_window=64 * 1024)
    sid, block = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    server.receive_data(block)
    server.send_headers(sid, [(b":status", b"200")])
    server.send_data(sid, b"x" * 60_000)
    codec.feed(server.data_to_send())
    assert server.local_flow_control_window(sid) < 6000  # the server sees the window nearly spent
    assert codec.take_output() == b""
    codec.consumed(sid, 60_000)
    server.receive_data(codec.take_output())
    assert server.local_flow_control_window(sid) >= 60_000


def test_ping_answered_and_settings_acknowledged() -> None:
    """PING gets a PING ACK with the same payload; a SETTINGS change is acknowledged and applied."""
    codec, _rec, server = _pair()
    server.ping(b"12345678")
    server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 7})
    codec.feed(server.data_to_send())
    events = server.receive_data(codec.take_output())
    assert any(isinstance(e, h2.events.PingAckReceived) and e.ping_data == b"12345678" for e in events)
    assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)
    assert codec.max_concurrent_streams == 7


def test_reset_and_goaway_reported() -> None:
    """RST_STREAM and GOAWAY reach the listener with their codes and last stream id."""
    codec, rec, server = _pair()
    sid, block = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    _sid2, block2 = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    server.receive_data(block + block2)
    server.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
    server.close_connection(ErrorCodes.NO_ERROR, last_stream_id=sid)
    codec.feed(server.data_to_send())
    assert rec.resets == {sid: ErrorCodes.REFUSED_STREAM}
    assert rec.goaway == (sid, 0)


def test_cancel_sends_rst_stream() -> None:
    """reset() produces an RST_STREAM the server reports with the CANCEL code."""
    codec, _, server = _pair()
    sid, block = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    server.receive_data(block)
    events = server.receive_data(codec.reset(sid, CANCEL))
    assert any(isinstance(e, h2.events.StreamReset) and e.error_code == ErrorCodes.CANCEL for e in events)


def test_reserved_bit_of_the_stream_id_is_ignored() -> None:
    """A frame whose stream identifier has the reserved bit set is the stream's (RFC 9113 §4.1)."""
    codec, rec, _ = _pair()
    sid, _ = codec.open_stream(b"GET", b"/", b"h:1", [], True)
    assert sid == 1
    # HEADERS (:status 200, static index 8; END_HEADERS) and DATA "ok" (END_STREAM), each with
    # the stream id 0x80000001.
    codec.feed(b"\x00\x00\x01\x01\x04\x80\x00\x00\x01\x88" + b"\x00\x00\x02\x00\x01\x80\x00\x00\x01ok")
    assert rec.headers == {1: [(b":status", b"200")]}
    assert rec.data == {1: b"ok"}
    assert rec.ended == {1}


def test_garbage_is_a_protocol_error() -> None:
    """A frame larger than our SETTINGS_MAX_FRAME_SIZE fails the connection."""
    codec, _, _ = _pair()
    with pytest.raises(H2ProtocolError):
        codec.feed(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([b"x-a", b"x-b", b"content-length"]), _value), max_size=4),
        min_size=1,
        max_size=25,
    )
)
def test_repeated_header_blocks_decode_exactly(answers: list[list[tuple[bytes, bytes]]]) -> None:
    """Header blocks reusing the peer's dynamic table decode to exactly what it sent (decode cache)."""
    codec, rec, server = _pair()
    for i, extra in enumerate(answers * 2):
        sid, block = codec.open_stream(b"GET", b"/", b"h:1", [], True)
        server.receive_data(block)
        sent = [(b":status", b"200"), *extra]
        server.send_headers(sid, sent, end_stream=True)
        codec.feed(server.data_to_send())
        assert rec.headers[sid] == sent, i


_frame_st = st.builds(
    lambda kind, flags, sid, payload: (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload
    ),
    st.integers(0, 11),
    st.integers(0, 255),
    st.sampled_from([0, 1, 3, 5, 2**31 - 1]),
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_frame_st, max_size=8))
def test_hostile_frames_only_ever_raise_protocol_errors(frames: list[bytes]) -> None:
    """Whatever a broken or hostile peer sends, the codec fails with H2ProtocolError or copes."""
    codec, _, _ = _pair()
    codec.open_stream(b"GET", b"/", b"h:1", [], True)
    codec.open_stream(b"POST", b"/", b"h:1", [], False)
    try:
        for f in frames:
            codec.feed(f)
    except H2ProtocolError:
        pass
