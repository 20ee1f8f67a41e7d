"""The lean h2c server codec, driven with bytes: python-h2 as the independent client, and hostile input."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http import h2_frames, h2_server_codec
from dataplane.http.h2_frames import (
    COMPRESSION_ERROR,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    PREFACE,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    STREAM_CLOSED,
    FramePrefixes,
    H2ProtocolError,
    frame,
)
from dataplane.http.h2_server_codec import ServerCodec, ServerListener, StreamClosed, encode_response

REQUEST = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"t"), (b":path", b"/x")]
CLIENT_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame


def _frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


def _block(fields: list[tuple[bytes, bytes]]) -> bytes:
    return hpack.Encoder().encode(fields)


class Listener(ServerListener):
    """A ServerListener that records every callback."""

    def __init__(self) -> None:
        self.requests: dict[int, tuple[list[tuple[bytes, bytes]], bool]] = {}
        self.data: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.trailers: dict[int, list[tuple[bytes, bytes]]] = {}
        self.malformed: list[int] = []
        self.client_resets: list[int] = []
        self.stream_errors: list[int] = []
        self.windows: list[int] = []
        self.goaways: list[int] = []

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        self.requests[stream_id] = (list(headers), end_stream)
        if end_stream:
            self.ended.add(stream_id)

    def on_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        self.data[stream_id] = self.data.get(stream_id, b"") + data
        if end_stream:
            self.ended.add(stream_id)

    def on_trailers(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.trailers[stream_id] = list(headers)
        self.ended.add(stream_id)

    def on_malformed_block(self, stream_id: int) -> None:
        self.malformed.append(stream_id)

    def on_client_reset(self, stream_id: int) -> bool:
        self.client_resets.append(stream_id)
        return False

    def on_stream_error(self, stream_id: int) -> None:
        self.stream_errors.append(stream_id)

    def on_window(self, stream_id: int) -> None:
        self.windows.append(stream_id)

    def on_peer_goaway(self, code: int) -> bool:
        self.goaways.append(code)
        return False


def _codec(**overrides: int) -> tuple[ServerCodec, Listener]:
    listener = Listener()
    options = {
        "max_concurrent_streams": 100,
        "initial_window": 1 << 20,
        "connection_window": 1 << 20,
        "max_frame_size": 1 << 16,
        "max_header_list_size": 64 * 1024,
        **overrides,
    }
    return ServerCodec(listener, **options), listener


def _started(**overrides: int) -> tuple[ServerCodec, Listener]:
    codec, listener = _codec(**overrides)
    codec.feed(PREFACE + CLIENT_SETTINGS)
    codec.take_output()
    return codec, listener


def _client() -> h2.connection.H2Connection:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    return client


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of every frame in ``data``."""
    out = []
    at = 0
    while at + 9 <= len(data):
        n = int.from_bytes(data[at : at + 3], "big")
        sid = int.from_bytes(data[at + 5 : at + 9], "big") & 0x7FFFFFFF
        out.append((data[at + 3], data[at + 4], sid, data[at + 9 : at + 9 + n]))
        at += 9 + n
    return out


def _resets(data: bytes) -> dict[int, int]:
    return {sid: int.from_bytes(p, "big") for kind, _, sid, p in _frames(data) if kind == 3}


def _fails(codec: ServerCodec, data: bytes) -> int:
    with pytest.raises(H2ProtocolError) as exc:
        codec.feed(data)
    return exc.value.code


def test_an_exchange_with_python_h2_as_the_client() -> None:
    """h2 reads our SETTINGS and answer; we decode its request, body and credit; both sides stay in step."""
    codec, listener = _codec(max_concurrent_streams=77, initial_window=1 << 20)
    client = _client()
    events = client.receive_data(codec.take_output())
    assert any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)
    remote = client.remote_settings
    assert (remote.max_concurrent_streams, remote.initial_window_size, remote.enable_push) == (77, 1 << 20, 0)
    assert remote.max_frame_size == 1 << 16 and remote.max_header_list_size == 64 * 1024
    assert client.outbound_flow_control_window == 1 << 20  # the connection window opened
    client.send_headers(1, [*REQUEST, (b"cookie", b"a=1")])
    client.send_data(1, b"x" * 50_000)
    client.send_data(1, b"x" * 50_000, end_stream=True)
    codec.feed(client.data_to_send())
    assert listener.requests[1] == ([*REQUEST, (b"cookie", b"a=1")], False)
    assert listener.data[1] == b"x" * 100_000 and 1 in listener.ended
    codec.send_headers(1, encode_response(200, [(b"content-type", b"text/plain")], 2), False)
    codec.send_data(1, b"ok", True)
    events = client.receive_data(codec.take_output())
    [response] = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert response.headers == [
        (b":status", b"200"),
        (b"content-type", b"text/plain"),
        (b"content-length", b"2"),
    ]
    assert [e.data for e in events if isinstance(e, h2.events.DataReceived)] == [b"ok"]
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)
    assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)
    assert not codec.is_open(1)


def test_credit_is_returned_as_data_arrives() -> None:
    """Past half a window of DATA, WINDOW_UPDATE goes back for the stream and the connection; none
    for a stream the client ended."""
    codec, listener = _started(initial_window=65535, connection_window=65535)

    def updates() -> dict[int, int]:
        return {
            sid: int.from_bytes(p, "big") for kind, _, sid, p in _frames(codec.take_output()) if kind == 8
        }

    codec.feed(_frame(1, 4, 1, _block(REQUEST)) + _frame(0, 0, 1, b"x" * 40000))
    assert updates() == {0: 40000, 1: 40000}
    codec.feed(_frame(0, 0, 1, b"x" * 60000))  # within the windows only thanks to that credit
    assert updates() == {0: 60000, 1: 60000}
    codec.feed(_frame(0, 1, 1, b"x" * 40000))
    assert updates() == {0: 40000}
    assert len(listener.data[1]) == 140000 and 1 in listener.ended


def test_bad_preface_is_a_connection_error() -> None:
    """Bytes other than the client preface, or a preface not followed by SETTINGS, are PROTOCOL_ERROR."""
    codec, _ = _codec()
    assert _fails(codec, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n") == PROTOCOL_ERROR
    codec, _ = _codec()
    assert _fails(codec, b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n") == PROTOCOL_ERROR
    codec, _ = _codec()
    assert _fails(codec, PREFACE + _frame(6, 0, 0, b"\x00" * 8)) == PROTOCOL_ERROR  # PING first
    codec, listener = _codec()
    codec.feed(PREFACE[:10])
    codec.feed(PREFACE[10:] + CLIENT_SETTINGS[:4])  # split anywhere: still fine
    codec.feed(CLIENT_SETTINGS[4:] + _frame(1, 5, 1, _block(REQUEST)))
    assert 1 in listener.requests


@pytest.mark.parametrize(
    "frame",
    [
        _frame(0, 0, 0, b"x"),  # DATA
        _frame(1, 5, 0, b"\x82"),  # HEADERS
        _frame(3, 0, 0, b"\x00" * 4),  # RST_STREAM
        _frame(2, 0, 0, b"\x00" * 5),  # PRIORITY
        _frame(4, 0, 1, b""),  # SETTINGS on a stream
        _frame(6, 0, 1, b"\x00" * 8),  # PING on a stream
        _frame(7, 0, 1, b"\x00" * 8),  # GOAWAY on a stream
        _frame(5, 4, 1, b"\x00\x00\x00\x02\x82"),  # PUSH_PROMISE from a client
        _frame(9, 4, 1, b"\x82"),  # CONTINUATION without HEADERS
    ],
    ids=["DATA", "HEADERS", "RST_STREAM", "PRIORITY", "SETTINGS", "PING", "GOAWAY", "PUSH_PROMISE", "CONT"],
)
def test_frames_on_the_wrong_stream_are_protocol_errors(frame: bytes) -> None:
    """Stream-0-only frames on a stream, stream frames on stream 0, PUSH_PROMISE, a lone CONTINUATION."""
    codec, _ = _started()
    assert _fails(codec, frame) == PROTOCOL_ERROR


@pytest.mark.parametrize(
    "frame",
    [
        _frame(6, 0, 0, b"\x00" * 7),
        _frame(3, 0, 1, b"\x00" * 3),
        _frame(8, 0, 0, b"\x00" * 5),
        _frame(4, 0, 0, b"\x00" * 5),
    ],
    ids=["PING", "RST_STREAM", "WINDOW_UPDATE", "SETTINGS"],
)
def test_frames_of_the_wrong_size_are_frame_size_errors(frame: bytes) -> None:
    """PING of 7 octets, RST_STREAM of 3, WINDOW_UPDATE of 5, SETTINGS of 5: FRAME_SIZE_ERROR."""
    codec, _ = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)))
    assert _fails(codec, frame) == FRAME_SIZE_ERROR


def test_header_block_split_over_continuation_frames() -> None:
    """HEADERS + CONTINUATION form one block; any other frame in between is a PROTOCOL_ERROR."""
    block = _block([*REQUEST, (b"x-long", b"v" * 300)])
    codec, listener = _started()
    codec.feed(_frame(1, 1, 1, block[:100]) + _frame(9, 0, 1, block[100:200]) + _frame(9, 4, 1, block[200:]))
    assert listener.requests[1] == ([*REQUEST, (b"x-long", b"v" * 300)], True)
    codec, _ = _started()
    assert _fails(codec, _frame(1, 1, 1, block[:100]) + _frame(6, 0, 0, b"\x00" * 8)) == PROTOCOL_ERROR
    codec, _ = _started()
    assert _fails(codec, _frame(1, 1, 1, block[:100]) + _frame(9, 4, 3, block[100:])) == PROTOCOL_ERROR


def test_a_continuation_flood_is_cut_at_the_header_list_size() -> None:
    """CONTINUATION frames never ending the block: ENHANCE_YOUR_CALM once past SETTINGS_MAX_HEADER_LIST_SIZE."""
    codec, _ = _started(max_header_list_size=4096)
    codec.feed(_frame(1, 0, 1, b"\x82"))
    for _ in range(3):
        codec.feed(_frame(9, 0, 1, b"\x82" * 1000))
    assert _fails(codec, _frame(9, 0, 1, b"\x82" * 1200)) == ENHANCE_YOUR_CALM


@pytest.mark.parametrize(
    "block",
    [b"\xff\xff\xff\xff\x0f", b"\x7f", b"\x00\x85\xff\xff\xff\xff\xff\x01a", b"\x3f\xff\xff\xff\x0f"],
    ids=["index out of table", "truncated integer", "bad huffman", "table size past the limit"],
)
def test_hpack_errors_are_compression_errors(block: bytes) -> None:
    """A header block HPACK cannot decode ends the connection with COMPRESSION_ERROR (RFC 9113 §4.3)."""
    codec, _ = _started()
    assert _fails(codec, _frame(1, 5, 1, block)) == COMPRESSION_ERROR


def test_an_oversized_header_list_ends_the_connection() -> None:
    """A block decoding to more than SETTINGS_MAX_HEADER_LIST_SIZE (an HPACK bomb) ends the connection."""
    codec, _ = _started(max_header_list_size=1000)
    assert _fails(codec, _frame(1, 5, 1, _block([*REQUEST, (b"x-big", b"v" * 990)]))) == COMPRESSION_ERROR


def test_stream_ids_must_be_odd_and_increasing() -> None:
    """An even stream id is PROTOCOL_ERROR; HEADERS on a closed (lower) stream id is STREAM_CLOSED."""
    codec, _ = _started()
    assert _fails(codec, _frame(1, 5, 2, _block(REQUEST))) == PROTOCOL_ERROR
    codec, listener = _started()
    codec.feed(_frame(1, 5, 5, _block(REQUEST)))
    codec.send_headers(5, encode_response(204, [], None), True)
    assert _fails(codec, _frame(1, 5, 3, _block(REQUEST))) == STREAM_CLOSED
    assert list(listener.requests) == [5]


@pytest.mark.parametrize(
    "frame",
    [_frame(0, 0, 7, b"x"), _frame(8, 0, 7, b"\x00\x00\x00\x01"), _frame(3, 0, 7, b"\x00\x00\x00\x08")],
    ids=["DATA", "WINDOW_UPDATE", "RST_STREAM"],
)
def test_frames_on_idle_streams_are_protocol_errors(frame: bytes) -> None:
    """DATA, WINDOW_UPDATE or RST_STREAM on a stream never opened (RFC 9113 §5.1 idle)."""
    codec, _ = _started()
    assert _fails(codec, frame) == PROTOCOL_ERROR


def test_priority_and_unknown_frames_are_ignored() -> None:
    """PRIORITY (also on an idle stream) and an unknown frame type change nothing."""
    codec, listener = _started()
    codec.feed(
        _frame(2, 0, 9, b"\x00\x00\x00\x00\x10") + _frame(0x42, 0, 0, b"?") + _frame(1, 5, 1, _block(REQUEST))
    )
    assert list(listener.requests) == [1] and not codec.take_output()


def test_streams_past_max_concurrent_are_refused() -> None:
    """The third stream with max_concurrent_streams=2 gets RST_STREAM(REFUSED_STREAM), unseen; its late DATA is ignored."""
    codec, listener = _started(max_concurrent_streams=2)
    codec.feed(b"".join(_frame(1, 4, sid, _block(REQUEST)) for sid in (1, 3, 5)))
    assert list(listener.requests) == [1, 3]
    assert _resets(codec.take_output()) == {5: REFUSED_STREAM}
    codec.feed(_frame(0, 1, 5, b"late"))
    assert 5 not in listener.data
    codec.reset_stream(1, 8)
    codec.feed(_frame(1, 4, 7, _block(REQUEST)))  # a slot is free again
    assert 7 in listener.requests


def test_frames_after_the_client_ended_the_stream_are_stream_errors() -> None:
    """DATA or HEADERS after END_STREAM: RST_STREAM(STREAM_CLOSED) on that stream, the connection goes on."""
    codec, listener = _started()
    codec.feed(_frame(1, 5, 1, _block(REQUEST)) + _frame(1, 5, 3, _block(REQUEST)))
    codec.feed(_frame(0, 0, 1, b"more"))
    codec.feed(_frame(1, 5, 3, _block([(b"x-t", b"1")])))
    assert _resets(codec.take_output()) == {1: STREAM_CLOSED, 3: STREAM_CLOSED}
    assert listener.stream_errors == [1, 3] and 1 not in listener.data


def test_trailers_and_a_second_block_without_end_stream() -> None:
    """A second block with END_STREAM is trailers; without it the listener hears of a malformed block."""
    codec, listener = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)) + _frame(0, 0, 1, b"body"))
    codec.feed(_frame(1, 5, 1, _block([(b"x-checksum", b"1")])))
    assert listener.trailers[1] == [(b"x-checksum", b"1")] and 1 in listener.ended
    codec.feed(_frame(1, 4, 3, _block(REQUEST)) + _frame(1, 4, 3, _block([(b"x-t", b"1")])))
    assert listener.malformed == [3]


def test_late_frames_on_a_stream_we_reset_are_ignored() -> None:
    """After our RST_STREAM, the client's DATA, trailers and credit still in flight change nothing."""
    codec, listener = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)))
    codec.send_headers(1, encode_response(413, [], 0), True)
    codec.reset_stream(1, 0)
    codec.take_output()
    codec.feed(
        _frame(0, 0, 1, b"x" * 100)
        + _frame(1, 5, 1, _block([(b"x-t", b"1")]))
        + _frame(8, 0, 1, b"\x00\x00\x00\x01")
    )
    codec.feed(_frame(3, 0, 1, b"\x00\x00\x00\x08"))
    assert 1 not in listener.data and not listener.trailers and not listener.client_resets
    with pytest.raises(StreamClosed):
        codec.send_data(1, b"x", True)


def test_client_reset_is_reported_once() -> None:
    """RST_STREAM on an open stream reaches the listener; on a closed one it is ignored."""
    codec, listener = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)) + _frame(3, 0, 1, b"\x00\x00\x00\x08"))
    codec.feed(_frame(3, 0, 1, b"\x00\x00\x00\x08"))
    assert listener.client_resets == [1] and not codec.is_open(1)


def test_the_client_overrunning_a_window_is_a_flow_control_error() -> None:
    """DATA past the stream's or the connection's window: FLOW_CONTROL_ERROR."""
    codec, _ = _started(initial_window=65535, connection_window=1 << 20)
    codec.feed(_frame(1, 4, 1, _block(REQUEST)))
    assert _fails(codec, _frame(0, 0, 1, b"x" * 65536)) == FLOW_CONTROL_ERROR
    codec, _ = _started(initial_window=1 << 20, connection_window=65535)
    codec.feed(_frame(1, 4, 1, _block(REQUEST)))
    assert _fails(codec, _frame(0, 0, 1, b"x" * 65536)) == FLOW_CONTROL_ERROR


def test_send_windows_follow_window_update_and_settings() -> None:
    """Our send window: the client's initial window, its WINDOW_UPDATEs, and SETTINGS changes for open streams."""
    codec, listener = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)))
    assert codec.window(1) == 65535
    codec.send_data(1, b"x" * 1000, False)
    assert codec.window(1) == 64535
    codec.feed(_frame(8, 0, 1, (5000).to_bytes(4, "big")))
    assert codec.window(1) == 64535  # the connection window is the smaller one now
    codec.feed(_frame(8, 0, 0, (100_000).to_bytes(4, "big")))
    assert codec.window(1) == 69535 and listener.windows == [1, 0]
    codec.feed(_frame(4, 0, 0, b"\x00\x04" + (65535 + 10).to_bytes(4, "big")))
    assert codec.window(1) == 69545 and listener.windows[-1] == 0
    assert (4, 1, 0, b"") in _frames(codec.take_output())  # SETTINGS acknowledged


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (_frame(8, 0, 0, (2**31 - 1).to_bytes(4, "big")), FLOW_CONTROL_ERROR),
        (_frame(8, 0, 0, b"\x00\x00\x00\x00"), PROTOCOL_ERROR),
        (_frame(4, 0, 0, b"\x00\x04" + (2**31).to_bytes(4, "big")), FLOW_CONTROL_ERROR),
        (_frame(4, 0, 0, b"\x00\x05" + (100).to_bytes(4, "big")), PROTOCOL_ERROR),
        (_frame(4, 0, 0, b"\x00\x02" + (2).to_bytes(4, "big")), PROTOCOL_ERROR),
        (_frame(4, 1, 0, b"\x00" * 6), FRAME_SIZE_ERROR),
    ],
    ids=[
        "conn window overflow",
        "conn increment 0",
        "initial window",
        "max frame",
        "enable push",
        "ack payload",
    ],
)
def test_bad_windows_and_settings_are_connection_errors(frame: bytes, code: int) -> None:
    """Connection window past 2^31-1, a zero increment, out-of-range SETTINGS values, an ACK with a payload."""
    codec, _ = _started()
    assert _fails(codec, frame) == code


def test_stream_window_overflow_resets_only_that_stream() -> None:
    """WINDOW_UPDATE taking a stream window past 2^31-1: RST_STREAM(FLOW_CONTROL_ERROR) on it (§6.9.1)."""
    codec, listener = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)) + _frame(8, 0, 1, (2**31 - 1).to_bytes(4, "big")))
    assert _resets(codec.take_output()) == {1: FLOW_CONTROL_ERROR} and listener.stream_errors == [1]


def test_ping_is_answered_and_goaway_reported() -> None:
    """A PING gets its ACK with the same payload, a PING ACK nothing; GOAWAY's code reaches the listener."""
    codec, listener = _started()
    codec.feed(_frame(6, 0, 0, b"12345678") + _frame(6, 1, 0, b"abcdefgh"))
    assert _frames(codec.take_output()) == [(6, 1, 0, b"12345678")]
    codec.feed(_frame(7, 0, 0, b"\x00\x00\x00\x00\x00\x00\x00\x00"))
    assert listener.goaways == [0]


def test_a_large_answer_block_is_split_at_the_client_frame_size() -> None:
    """An answer header block longer than the client's SETTINGS_MAX_FRAME_SIZE goes out as HEADERS + CONTINUATION."""
    codec, _ = _started()
    codec.feed(_frame(1, 5, 1, _block(REQUEST)))
    headers = [(b"x-%d" % i, b"v" * 1000) for i in range(40)]
    codec.send_headers(1, encode_response(200, headers, None), True)
    frames = _frames(codec.take_output())
    assert [f[0] for f in frames] == [1, 9, 9] and frames[-1][1] == 4
    decoded = hpack.Decoder().decode(b"".join(f[3] for f in frames), raw=True)
    assert decoded == [(b":status", b"200"), *headers]


def test_answer_encoding() -> None:
    """:status indexed or literal, connection-specific fields dropped, content-length last; a bad status raises."""
    decode = hpack.Decoder().decode
    block = encode_response(418, [(b"connection", b"close"), (b"x-a", b"1"), (b"date", b"d")], 5)
    assert decode(block, raw=True) == [
        (b":status", b"418"),
        (b"x-a", b"1"),
        (b"date", b"d"),
        (b"content-length", b"5"),
    ]
    assert decode(encode_response(200, [(b"x", b"y" * 300)], None), raw=True) == [
        (b":status", b"200"),
        (b"x", b"y" * 300),
    ]
    assert decode(encode_response(299, [], None), raw=True) == [(b":status", b"299")]
    # An HTTP/1.1 worker's value with trailing whitespace (llhttp keeps it): malformed in h2
    # (RFC 9113 §8.2.1), so it goes without; an empty value stays empty.
    trailing = [(b"x-a", b"a b \t"), (b"server", b"w "), (b"x-e", b""), (b"x-s", b" ")]
    assert decode(encode_response(200, trailing, None), raw=True) == [
        (b":status", b"200"),
        (b"x-a", b"a b"),
        (b"server", b"w"),
        (b"x-e", b""),
        (b"x-s", b""),
    ]
    with pytest.raises(ValueError):
        encode_response(1000, [], None)


def test_repeated_answer_headers_encode_the_same_and_the_cache_stays_bounded() -> None:
    """A header list answered again (encoded blocks are cached) gives the same fields, each
    answer with its own content-length; ever new lists never hold more than the bound."""
    decode = hpack.Decoder().decode
    headers = [(b"content-type", b"application/json"), (b"x-sim", b"a")]
    for length in (5, 5, 1234, None, 0):
        fields = decode(encode_response(200, list(headers), length), raw=True)
        assert fields == [(b":status", b"200"), *headers] + (
            [(b"content-length", b"%d" % length)] if length is not None else []
        )
    assert decode(encode_response(404, list(headers), 1), raw=True)[0] == (b":status", b"404")
    for i in range(2000):
        fields = decode(encode_response(200, [(b"x-request-id", b"%d" % i)], i), raw=True)
        assert fields == [(b":status", b"200"), (b"x-request-id", b"%d" % i), (b"content-length", b"%d" % i)]
    assert len(h2_server_codec._BLOCKS) <= h2_server_codec._BLOCKS_MAX
    assert len(h2_frames._LENGTH_FIELDS) <= h2_frames._LENGTH_FIELDS_MAX


_answer_field = st.tuples(
    st.sampled_from([b"content-type", b"x-a", b"connection", b"date", b"x-" + b"n" * 130]),
    st.sampled_from([b"", b"1", b"application/json", b"v" * 200, b"w" * 900]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([200, 200, 404, 299]),
            st.lists(_answer_field, max_size=3),
            st.none() | st.integers(0, 3000),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_cached_answer_blocks_are_the_blocks_encoded_afresh(
    answers: list[tuple[int, list[tuple[bytes, bytes]], int | None]],
) -> None:
    """Whatever answers came before (the same list again, equal fields as new objects, the
    caller's list changed after the call), a block is the one encoded without any cache."""
    decode = hpack.Decoder().decode

    def afresh(status: int, fields: list[tuple[bytes, bytes]], length: int | None) -> bytes:
        block = h2_server_codec._encode_fields(status, fields)
        return block if length is None else block + encode_response(204, [], length)[1:]

    for status, fields, length in answers:
        expected = afresh(status, fields, length)
        copy = [(bytes(bytearray(n)), bytes(bytearray(v))) for n, v in fields]  # equal, not identical
        assert encode_response(status, fields, length) == expected
        assert encode_response(status, copy, length) == expected
        fields.append((b"x-later", b"changed"))  # the caller reuses its list for another answer
        assert encode_response(status, fields, length) == afresh(status, fields, length)
        assert encode_response(status, copy, length) == expected
        assert decode(expected, raw=True)[0] == (b":status", b"%d" % status)


def test_frame_headers_carry_any_length_and_stream_id() -> None:
    """The 9-octet frame header (RFC 9113 §4.1) for lengths up to 2^24-1 and stream ids up to 2^31-1."""
    for n, sid in ((0, 1), (16383, 3), (16384, 2**31 - 1), (70000, 2**30 + 1), (2**24 - 1, 5)):
        data = frame(0, 1, sid, b"x" * n)
        assert data[:9] == n.to_bytes(3, "big") + bytes((0, 1)) + sid.to_bytes(4, "big")
        assert len(data) == 9 + n


@given(st.integers(0, 9), st.integers(0, 255), st.lists(st.integers(0, 2**24 - 1) | st.integers(0, 12)))
def test_frame_prefixes_are_a_headers_length_type_and_flags(
    kind: int, flags: int, lengths: list[int]
) -> None:
    """Made or taken from the table (below 8 here), the first five octets of a frame header."""
    prefixes = FramePrefixes(kind, flags, lengths=8)
    for n in lengths + lengths:
        assert prefixes.of(n) == n.to_bytes(3, "big") + bytes((kind, flags))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**30 - 1), st.booleans())
def test_the_reserved_bit_of_a_stream_id_is_ignored(half: int, reserved: bool) -> None:
    """RFC 9113 §4.1: the stream id is the low 31 bits; the reserved bit is ignored on receipt."""
    sid = 2 * half + 1
    codec, listener = _started()
    raw = (sid | (reserved << 31)).to_bytes(4, "big")
    head = _frame(1, 4, 0, _block(REQUEST))[:5]
    codec.feed(head + raw + _block(REQUEST) + b"\x00\x00\x02\x00\x01" + raw + b"ab")
    assert listener.requests == {sid: (REQUEST, False)} and listener.data == {sid: b"ab"}
    assert codec.highest_stream_id == sid and sid in listener.ended


_frame_st = st.builds(
    _frame,
    st.integers(0, 11),
    st.integers(0, 255),
    st.sampled_from([0, 1, 2, 3, 5, 2**31 - 1]),
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_frame_st, max_size=10))
def test_hostile_frames_only_ever_raise_protocol_errors(frames: list[bytes]) -> None:
    """Whatever a broken or hostile client sends, the codec fails with H2ProtocolError or copes."""
    codec, _ = _started()
    codec.feed(_frame(1, 4, 1, _block(REQUEST)) + _frame(1, 5, 3, _block(REQUEST)))
    try:
        for f in frames:
            codec.feed(f)
    except H2ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 70_000),
    st.integers(0, 70_000),
    st.sampled_from([16384, 20000, 1 << 16]),
    st.integers(0, 150_000),
    st.booleans(),
)
def test_send_fitting_sends_what_the_windows_and_the_frame_size_allow(
    stream_window: int, conn_window: int, max_frame: int, size: int, end: bool
) -> None:
    """DATA frames carry the start of the data, each within the client's frame size, as much as
    both windows allow; END_STREAM only on the last frame and only once all of it went; the
    windows and the DATA frame count follow."""
    codec, _ = _codec()
    settings = b"\x00\x04" + stream_window.to_bytes(4, "big") + b"\x00\x05" + max_frame.to_bytes(4, "big")
    codec.feed(PREFACE + _frame(4, 0, 0, settings) + _frame(1, 5, 1, _block(REQUEST)))
    codec.conn_send_window = conn_window
    codec.take_output()
    data = bytes(i % 251 for i in range(size))
    sent = codec.send_fitting(1, data, end)
    frames = _frames(codec.take_output())
    assert sent == min(size, stream_window, conn_window)
    assert all(kind == 0 and sid == 1 and len(p) <= max_frame for kind, _, sid, p in frames)
    assert b"".join(p for *_, p in frames) == data[:sent]
    ended = end and sent == size
    assert [flags for _, flags, _, _ in frames] == [0] * (len(frames) - ended) + [1] * ended
    assert codec.data_frames == len(frames)
    assert codec.window(1) == (min(stream_window, conn_window) - sent if not ended else 0)
    assert codec.is_open(1) == (not ended)


def test_send_fitting_on_a_closed_stream_raises() -> None:
    """A stream reset (or never opened) is StreamClosed, nothing queued."""
    codec, _ = _started()
    with pytest.raises(StreamClosed):
        codec.send_fitting(1, b"x", False)
    codec.feed(_frame(1, 5, 1, _block(REQUEST)))
    codec.reset_stream(1, 8)
    codec.take_output()
    with pytest.raises(StreamClosed):
        codec.send_fitting(1, b"", True)
    assert not codec.take_output()


def test_a_small_answer_leaves_whole_or_not_at_all() -> None:
    """``answer`` sends HEADERS + one ending DATA frame when both fit the windows, else nothing (False)."""
    codec, _ = _started()
    codec.feed(_frame(1, 5, 1, _block(REQUEST)) + _frame(1, 5, 3, _block(REQUEST)))
    block = encode_response(200, [], 3)
    assert codec.answer(1, block, b"abc")
    assert [(f[0], f[1], f[2]) for f in _frames(codec.take_output())] == [(1, 4, 1), (0, 1, 1)]
    assert not codec.is_open(1) and codec.window(3) == 65535 - 3
    assert not codec.answer(3, block, b"x" * 70000) and not codec.take_output()
    assert codec.window(3) == 65535 - 3


def test_answers_carry_their_lengths_and_stream_ids_on_both_sides_of_the_header_table() -> None:
    """``answer``'s frame headers are made once per length below a bound: the frames of answers
    of lengths around it, on many streams, each read back as sent."""
    codec, _ = _started()
    block = encode_response(200, [], 0)
    sid = 1
    for n in (0, 1, 4095, 4096, 4097, 4095, 4096, 0, 16384):
        codec.feed(_frame(1, 5, sid, _block(REQUEST)))
        body = bytes([sid % 251]) * n
        assert codec.answer(sid, block, body)
        assert _frames(codec.take_output()) == [(1, 4, sid, block), (0, 1, sid, body)]
        sid += 2 * 40_000 + 2  # ids past 2^16 too


_request_lists = st.lists(
    st.sampled_from(
        [
            REQUEST,
            [*REQUEST, (b"x-id", b"1")],
            [*REQUEST, (b"x-id", b"2")],
            [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"t"), (b":path", b"/y")],
        ]
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=100, deadline=None)
@given(_request_lists, st.lists(st.booleans(), min_size=12, max_size=12))
def test_cached_blocks_always_decode_to_what_the_client_encoded(
    requests: list[list[tuple[bytes, bytes]]], index: list[bool]
) -> None:
    """Blocks repeated, alternating, or changing the client's table (indexed or not): each
    request's fields are the ones the client's encoder encoded."""
    codec, listener = _started()
    encoder = hpack.Encoder()
    for i, fields in enumerate(requests):
        sid = 2 * i + 1
        sent = fields if index[i] else [hpack.NeverIndexedHeaderTuple(n, v) for n, v in fields]
        codec.feed(_frame(1, 5, sid, encoder.encode(sent)))
        assert listener.requests[sid][0] == fields
        codec.send_headers(sid, b"\x89", True)


def test_repeated_blocks_decode_once_until_the_table_changes() -> None:
    """A block seen before (the table unchanged) is decoded once; a block changing the table drops the cache."""
    codec, listener = _started()
    encoder = hpack.Encoder()
    cache = codec._decoder._decoded

    def request(sid: int, fields: list[tuple[bytes, bytes]]) -> int:
        codec.feed(_frame(1, 5, sid, encoder.encode(fields)))
        assert listener.requests[sid][0] == fields
        codec.send_headers(sid, b"\x89", True)
        return len(cache)

    assert request(1, REQUEST) == 0  # indexes its fields: changes the table, not cached
    assert [request(sid, REQUEST) for sid in (3, 5)] == [1, 1]  # fully indexed: the same bytes
    request(7, [*REQUEST, (b"x-id", b"1")])  # changes the table: what was cached is dropped
    assert request(9, REQUEST) == 1 and list(cache.values()) == [REQUEST]
