"""A lean server-side HTTP/2 codec (RFC 9113) for h2c connections: bytes in, callbacks out, no I/O.

Why hand-written: no well-kept fast HTTP/2 server codec exists for Python. python-h2 is the
well-kept one, and it is the cost: measured here (bench/http_server.py) it spends ~146 µs and
~550 Python calls per request (per-frame objects, event objects, stream state machines with
their transition tables, header validation and normalisation passes, HPACK encoding with a
dynamic table), 10x the rest of the front door. A server answering its own request path needs a
small part of HTTP/2, done here directly on bytes, as ``dataplane.router.upstream.h2c.codec``
does for the client side:

* the client preface (§3.4), which must be followed by its SETTINGS; our SETTINGS (given by the
  connection) take effect at once, the client's are applied and acknowledged (§6.5.3);
* request header blocks (HEADERS + CONTINUATION, §6.2, §6.10) decoded by ``h2_hpack.Decoder``
  behind one seam (``h2_hpack.BlockDecoder``), bounded by SETTINGS_MAX_HEADER_LIST_SIZE; answers are
  encoded statelessly ("literal without indexing" / static table, RFC 7541 §6.2.2), so nothing
  has to stay in step with the client's decoder;
* DATA under flow control both ways (§5.2, §6.9): receive credit goes back as soon as the
  connection took the bytes (into its bounded body buffer, or dropped), per stream and for the
  connection; send windows per stream and connection follow WINDOW_UPDATE and
  SETTINGS_INITIAL_WINDOW_SIZE (§6.9.2);
* the stream rules of §5.1 a server must enforce: client streams are odd and increasing
  (§5.1.1), frames other than HEADERS/PRIORITY on idle streams, HEADERS on closed ones, DATA on a
  stream the client ended; streams past our SETTINGS_MAX_CONCURRENT_STREAMS are refused with
  RST_STREAM(REFUSED_STREAM) (§5.1.2). Frames on a stream we reset are ignored (§5.4.2: they may
  still be in flight);
* PING (answered), GOAWAY, RST_STREAM, WINDOW_UPDATE; PRIORITY and unknown frame types are
  ignored (§5.3.2, §5.5); PUSH_PROMISE from a client is a protocol error (§8.4).

What a request's fields must look like (RFC 9113 §8.1.1) is not checked here: the connection
does it per stream (``h2_fields``), a malformed request being a stream error. Frame sizes and
floods are checked before the codec sees the bytes (``h2_guard``).

A connection error raises ``H2ProtocolError`` (its ``code`` goes into the GOAWAY); a stream error
queues RST_STREAM and tells the listener (``on_stream_error``).
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import i64, mypyc_attr

from dataplane.http.h2_frames import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    DATA_END_PREFIXES,
    DATA_PREFIXES,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    HEADERS_PREFIXES,
    MAX_WINDOW,
    OCTETS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    S_ENABLE_PUSH,
    S_INITIAL_WINDOW_SIZE,
    S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE,
    S_MAX_HEADER_LIST_SIZE,
    SETTINGS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    H2ProtocolError,
    content_length_field,
    frame,
    header_block,
    hpack_int,
    hpack_str,
    same_fields,
)
from dataplane.http.h2_hpack import BlockDecoder, HpackError
from dataplane.http.stream_table import StreamTable

# One list of connection-specific fields (RFC 9113 §8.2.2) for both encoders of an h2 answer.
from dataplane.http.wire import _H2_DROPPED, H2_STATUS, Headers

# Streams we reset whose late frames are still ignored (§5.4.2); the oldest are forgotten first.
_RESET_MEMORY: Final = 1024

# RFC 7541 Appendix A: static-table names of fields an answer often carries, as the prefix of
# "literal without indexing, indexed name" (§6.2.2, 4-bit index).
_RESPONSE_NAMES: Final[dict[bytes, bytes]] = {
    name: hpack_int(index, 4, 0)
    for name, index in (
        (b"accept-ranges", 18),
        (b"age", 21),
        (b"cache-control", 24),
        (b"content-encoding", 26),
        (b"content-language", 27),
        (b"content-length", 28),
        (b"content-type", 31),
        (b"date", 33),
        (b"etag", 34),
        (b"expires", 36),
        (b"last-modified", 44),
        (b"location", 46),
        (b"retry-after", 53),
        (b"server", 54),
        (b"set-cookie", 55),
        (b"vary", 59),
        (b"www-authenticate", 61),
    )
}
# :status fully indexed where the static table has it (RFC 7541 Appendix A, 8-14).
_STATUS_INDEXED: Final[dict[int, bytes]] = {
    200: b"\x88",
    204: b"\x89",
    206: b"\x8a",
    304: b"\x8b",
    400: b"\x8c",
    404: b"\x8d",
    500: b"\x8e",
}


# Encoded blocks of answers seen before, by (status, fields): a worker answers with the same
# few header lists over and over (only content-length varies, and it is encoded apart). The
# block is a pure function of its key (no encoder state), so a hit is the same bytes. Bounded:
# small blocks only, and the table starts over once full (a worker whose headers always vary
# pays one tuple and one failed lookup per answer, and keeps no memory).
_BLOCKS: Final[dict[tuple[int, tuple[tuple[bytes, bytes], ...]], bytes]] = {}
_BLOCKS_MAX: Final = 256
_BLOCK_CACHED_MAX: Final = 1024  # octets
# ``content-length: N`` fields by N (bodies of a few sizes repeat), bounded the same way.


class _LastAnswer:
    """The previous answer's status, fields and block (``encode_response``)."""

    __slots__ = ("block", "fields", "status")

    def __init__(self) -> None:
        self.status = 0  # no answer yet
        self.fields: Headers = []
        self.block = b""


# Before the table, the previous answer: a worker's answers repeat their header list, and the
# values arrive as new bytes objects each time, so a table lookup hashes every value anew and
# compares it once more; comparing with the previous answer's fields is the compare alone.
_LAST: Final = _LastAnswer()


def encode_response(status: int, headers: Headers, content_length: int | None) -> bytes:
    """The HPACK block of an answer (RFC 7541 §6.1, §6.2.2): ``:status``, the fields that are not
    connection-specific (RFC 9113 §8.2.2), then ``content-length`` if given. No encoder state.
    Raises ``ValueError`` for an impossible status (before anything is sent)."""
    last = _LAST
    if status == last.status and same_fields(headers, last.fields):
        block = last.block
    else:
        key = (status, tuple(headers))
        cached = _BLOCKS.get(key)
        if cached is None:
            block = _encode_fields(status, headers)
            if len(block) > _BLOCK_CACHED_MAX:
                return block if content_length is None else block + content_length_field(content_length)
            if len(_BLOCKS) >= _BLOCKS_MAX:
                _BLOCKS.clear()
            _BLOCKS[key] = block
        else:
            block = cached
        last.status = status
        last.fields = list(headers)  # a copy: the caller may reuse its list
        last.block = block
    if content_length is None:
        return block
    return block + content_length_field(content_length)


def _encode_fields(status: int, headers: Headers) -> bytes:
    """``encode_response`` without content-length, uncached."""
    first = _STATUS_INDEXED.get(status)
    if first is None:
        code = H2_STATUS.get(status)
        if code is None:
            if not 100 <= status <= 999:
                raise ValueError(f"invalid HTTP status {status}")
            code = b"%d" % status
        first = b"\x08\x03" + code  # literal, indexed name :status (8)
    parts = [first]
    names = _RESPONSE_NAMES
    dropped = _H2_DROPPED
    for name, value in headers:
        if name in dropped:
            continue
        if value and (value[-1] == 0x20 or value[-1] == 0x09):
            # Trailing whitespace is no part of an HTTP/1.1 field's value (RFC 9110 §5.5; llhttp
            # keeps it, a worker's answer may carry it), and makes an h2 field malformed (RFC 9113
            # §8.2.1): a client would refuse the answer. (llhttp drops the leading whitespace.)
            value = value.rstrip(b" \t")
        prefix = names.get(name)
        n = len(value)
        # String literals (RFC 7541 §5.2), their one-octet length inline when below 127.
        literal = OCTETS[n] + value if n < 127 else hpack_str(value)
        if prefix is not None:
            parts.append(prefix + literal)
        elif len(name) < 127:
            parts.append(b"\x00" + OCTETS[len(name)] + name + literal)
        else:
            parts.append(b"\x00" + hpack_str(name) + literal)
    return b"".join(parts)


class StreamClosed(Exception):
    """Sending on a stream that is no longer open on our side (reset, or already ended)."""


# Compiled (scripts/build_mypyc.sh), a native base class rather than a Protocol: the codec's
# calls (two per request) are vtable calls, not lookups by name with boxed arguments. Test and
# bench listeners are interpreted subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class ServerListener:
    """What the connection does with decoded frames (called from ``ServerCodec.feed``)."""

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        raise NotImplementedError

    def on_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        raise NotImplementedError

    def on_trailers(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def on_malformed_block(self, stream_id: int) -> None:
        raise NotImplementedError

    def on_client_reset(self, stream_id: int) -> bool:
        """The client reset an open stream; True to stop reading (the connection is ending)."""
        raise NotImplementedError

    def on_stream_error(self, stream_id: int) -> None:
        """The codec reset an open stream for the client's violation (§5.4.2)."""
        raise NotImplementedError

    def on_window(self, stream_id: int) -> None:
        """More send window on ``stream_id`` (0: the connection's, or every stream's)."""
        raise NotImplementedError

    def on_peer_goaway(self, code: int) -> bool:
        """The client's GOAWAY; True to stop reading (the connection is ending)."""
        raise NotImplementedError


class _Stream:
    """One open stream's state (one table entry per stream: one lookup, one pop)."""

    __slots__ = ("recv", "remote_open", "send", "sid", "unacked")

    def __init__(self, send: int, recv: int, remote_open: bool, sid: bytes) -> None:
        self.send = send  # what we may still send on it
        self.recv = recv  # what the client may still send us
        self.unacked = 0  # received, credit not yet returned
        self.remote_open = remote_open  # the client has not ended it (no END_STREAM yet)
        self.sid = sid  # its id as the last four octets of its frames' headers


class ServerCodec:
    """The connection-wide HTTP/2 state of one server connection; see the module docstring."""

    __slots__ = (
        "_buf",
        "_conn_recv",
        "_conn_recv_max",
        "_conn_unacked",
        "_continuation",
        "_decoder",
        "_listener",
        "_max_block",
        "_max_streams",
        "_preface",
        "_reset",
        "_stream_window",
        "_streams",
        "conn_send_window",
        "data_frames",
        "highest_stream_id",
        "out",
        "peer_initial_window",
        "peer_max_frame",
    )

    def __init__(
        self,
        listener: ServerListener,
        *,
        max_concurrent_streams: int,
        initial_window: int,
        connection_window: int,
        max_frame_size: int,
        max_header_list_size: int,
    ) -> None:
        self._listener = listener
        self.out: list[bytes] = []  # frames to send (``take_output``; the connection may read it)
        self._buf = b""
        self._preface = True  # still expecting the client preface (then its SETTINGS)
        self._streams: StreamTable[_Stream] = StreamTable()
        self._reset: dict[int, None] = {}  # streams we reset, oldest first
        self._continuation: tuple[int, int, bytearray] | None = None  # (stream, flags, block)
        self._decoder = BlockDecoder(max_header_list_size)
        # An encoded block is never longer than the list it decodes to (RFC 7541: every field
        # costs 32 octets of the list size; Huffman codes are at least 5 bits per octet).
        self._max_block = max_header_list_size
        self._max_streams = max_concurrent_streams
        self._stream_window = initial_window
        self._conn_recv_max = max(DEFAULT_WINDOW, connection_window)
        self._conn_recv = self._conn_recv_max
        self._conn_unacked = 0
        self.highest_stream_id = 0
        self.data_frames = 0  # DATA frames sent (h2_guard's WINDOW_UPDATE limit is relative to them)
        # The client's settings (RFC 9113 §6.5.2 defaults until its SETTINGS arrives).
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = 16384
        self.conn_send_window = DEFAULT_WINDOW
        settings = b"".join(
            k.to_bytes(2, "big") + v.to_bytes(4, "big")
            for k, v in (
                (S_MAX_CONCURRENT_STREAMS, max_concurrent_streams),
                (S_INITIAL_WINDOW_SIZE, initial_window),
                (S_MAX_FRAME_SIZE, max_frame_size),
                (S_MAX_HEADER_LIST_SIZE, max_header_list_size),
                (S_ENABLE_PUSH, 0),
            )
        )
        self.out.append(frame(SETTINGS, 0, 0, settings))
        if self._conn_recv_max > DEFAULT_WINDOW:
            grow = self._conn_recv_max - DEFAULT_WINDOW
            self.out.append(frame(WINDOW_UPDATE, 0, 0, grow.to_bytes(4, "big")))

    # -- receiving ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Decode every complete frame in ``data`` (plus what was left over), calling the listener."""
        buf = self._buf + data if self._buf else data
        # Native 64-bit ints for the offsets and the header's fields: compiled, each step of a
        # plain ``int`` checks for a boxed one.
        pos: i64 = 0
        length: i64
        end: i64
        sid: i64
        if self._preface:
            if len(buf) < 33:  # the preface and the header of the SETTINGS that must follow
                if PREFACE[: len(buf)] != buf[:24]:
                    raise H2ProtocolError("invalid connection preface")
                self._buf = buf
                return
            if buf[:24] != PREFACE or buf[27] != SETTINGS or buf[28] & ACK:
                raise H2ProtocolError("invalid connection preface (RFC 9113 §3.4)")
            self._preface = False
            pos = 24
        size: i64 = len(buf)
        while size - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            end = pos + 9 + length
            if end > size:
                break
            kind = buf[pos + 3]
            flags = buf[pos + 4]
            # The reserved bit cleared (RFC 9113 §4.1); from the octets: compiled,
            # ``int.from_bytes`` is a generic call and its slice a copy.
            sid = ((buf[pos + 5] & 0x7F) << 24) | (buf[pos + 6] << 16) | (buf[pos + 7] << 8) | buf[pos + 8]
            payload = buf[pos + 9 : end]
            pos = end
            if self._continuation is not None and kind != CONTINUATION:
                raise H2ProtocolError("frame interleaved in a header block (RFC 9113 §6.10)")
            if kind == DATA:
                self._on_data(sid, flags, payload, length)
            elif kind == HEADERS:
                if sid and flags & (END_HEADERS | PADDED | PRIORITY_FLAG) == END_HEADERS:
                    self._headers_done(sid, flags, payload)  # the common case: one plain block
                else:
                    self._on_headers(sid, flags, payload)
            elif kind == CONTINUATION:
                self._on_continuation(sid, flags, payload)
            elif kind == RST_STREAM:
                if self._on_reset(sid, payload):
                    self._buf = b""
                    return
            elif kind == WINDOW_UPDATE:
                self._on_window_update(sid, payload)
            elif kind == SETTINGS:
                self._on_settings(sid, flags, payload)
            elif kind == PING:
                if length != 8:
                    raise H2ProtocolError("PING of other than 8 octets", FRAME_SIZE_ERROR)
                if sid:
                    raise H2ProtocolError("PING on a stream")
                if not flags & ACK:
                    self.out.append(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                if sid:
                    raise H2ProtocolError("GOAWAY on a stream")
                if length < 8:
                    raise H2ProtocolError("GOAWAY shorter than 8 octets", FRAME_SIZE_ERROR)
                if self._listener.on_peer_goaway(int.from_bytes(payload[4:8], "big")):
                    self._buf = b""
                    return
            elif kind == PRIORITY:
                if not sid:
                    raise H2ProtocolError("PRIORITY on stream 0")
                if length != 5:
                    raise H2ProtocolError("PRIORITY of other than 5 octets", FRAME_SIZE_ERROR)
            elif kind == PUSH_PROMISE:
                raise H2ProtocolError("PUSH_PROMISE from a client (RFC 9113 §8.4)")
            # Unknown frame types: ignored (§5.5).
        self._buf = buf[pos:] if pos < size else b""

    def _idle(self, sid: int, what: str) -> H2ProtocolError:
        return H2ProtocolError(f"{what} on idle stream {sid} (RFC 9113 §5.1)")

    def _on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        if not sid:
            raise H2ProtocolError("DATA on stream 0")
        conn_recv = self._conn_recv - length
        if conn_recv < 0:
            raise H2ProtocolError("client overran the connection window", FLOW_CONTROL_ERROR)
        # Credit goes back at once: the connection takes the bytes into its bounded body buffer
        # or drops them (so the connection window never closes for long).
        unacked = self._conn_unacked + length
        if unacked >= self._conn_recv_max >> 1:
            self.out.append(frame(WINDOW_UPDATE, 0, 0, unacked.to_bytes(4, "big")))
            conn_recv += unacked
            unacked = 0
        self._conn_recv = conn_recv
        self._conn_unacked = unacked
        stream = self._streams.get(sid)
        if stream is None or not stream.remote_open:
            if sid > self.highest_stream_id:
                raise self._idle(sid, "DATA")
            if stream is not None:
                self._stream_error(sid, STREAM_CLOSED)  # DATA after END_STREAM (§5.1)
            elif sid not in self._reset:
                raise H2ProtocolError(f"DATA on closed stream {sid}", STREAM_CLOSED)
            return
        recv = stream.recv - length
        if recv < 0:
            raise H2ProtocolError("client overran a stream window", FLOW_CONTROL_ERROR)
        if flags & PADDED:
            pad = payload[0] if payload else 0
            if pad >= length:
                raise H2ProtocolError("padding exceeds the DATA payload")
            payload = payload[1 : length - pad]
        end = bool(flags & END_STREAM)
        if end:
            stream.remote_open = False  # no credit for a stream that is over
        else:
            unacked = stream.unacked + length
            window = self._stream_window
            if unacked >= window >> 1 or (recv == 0 and unacked >= min(1024, window >> 2)):
                self.out.append(frame(WINDOW_UPDATE, 0, sid, unacked.to_bytes(4, "big")))
                recv += unacked
                unacked = 0
            stream.unacked = unacked
        stream.recv = recv
        self._listener.on_data(sid, payload, end)

    def _on_headers(self, sid: int, flags: int, payload: bytes) -> None:
        block = header_block(sid, flags, payload)
        if flags & END_HEADERS:
            self._headers_done(sid, flags, block)
        else:
            if len(block) > self._max_block:
                raise H2ProtocolError(
                    "header block larger than SETTINGS_MAX_HEADER_LIST_SIZE", ENHANCE_YOUR_CALM
                )
            self._continuation = (sid, flags, bytearray(block))

    def _on_continuation(self, sid: int, flags: int, payload: bytes) -> None:
        pending = self._continuation
        if pending is None or pending[0] != sid:
            raise H2ProtocolError("unexpected CONTINUATION (RFC 9113 §6.10)")
        block = pending[2]
        block.extend(payload)
        if len(block) > self._max_block:
            # CONTINUATION floods (CVE-2024-27316 and kin): never buffer past what may be decoded.
            raise H2ProtocolError("header block larger than SETTINGS_MAX_HEADER_LIST_SIZE", ENHANCE_YOUR_CALM)
        if flags & END_HEADERS:
            self._continuation = None
            self._headers_done(sid, pending[1], bytes(block))

    def _headers_done(self, sid: int, flags: int, block: bytes) -> None:
        # Decoded first, whatever becomes of the stream: the HPACK table must stay in step.
        try:
            headers = self._decoder.decode(block)
        except HpackError as exc:
            raise H2ProtocolError(f"bad header block: {exc}", COMPRESSION_ERROR) from exc
        end = bool(flags & END_STREAM)
        if sid <= self.highest_stream_id:
            # A stream opened before (every open stream's id is at most highest_stream_id, so
            # a new one needs no lookup).
            stream = self._streams.get(sid)
            if stream is None:
                if sid in self._reset:
                    return  # a stream we reset: its late frames are ignored
                raise H2ProtocolError(f"HEADERS on closed stream {sid}", STREAM_CLOSED)
            if not stream.remote_open:
                self._stream_error(sid, STREAM_CLOSED)  # HEADERS after END_STREAM (§5.1)
            elif end:
                stream.remote_open = False
                self._listener.on_trailers(sid, headers)
            else:
                # A second block must end the stream (§8.1): the request is malformed.
                self._listener.on_malformed_block(sid)
            return
        if not sid & 1:
            raise H2ProtocolError(f"client opened even stream {sid} (RFC 9113 §5.1.1)")
        self.highest_stream_id = sid
        if self._streams.count >= self._max_streams:
            self._refuse(sid)
            return
        self._streams.put(
            sid, _Stream(self.peer_initial_window, self._stream_window, not end, sid.to_bytes(4, "big"))
        )
        self._listener.on_request(sid, headers, end)

    def _refuse(self, sid: int) -> None:
        """RST_STREAM(REFUSED_STREAM) past SETTINGS_MAX_CONCURRENT_STREAMS (§5.1.2): retryable."""
        self.out.append(frame(RST_STREAM, 0, sid, REFUSED_STREAM.to_bytes(4, "big")))
        self._remember_reset(sid)

    def _on_reset(self, sid: int, payload: bytes) -> bool:
        if not sid:
            raise H2ProtocolError("RST_STREAM on stream 0")
        if len(payload) != 4:
            raise H2ProtocolError("RST_STREAM of other than 4 octets", FRAME_SIZE_ERROR)
        if self._streams.pop(sid) is None:
            if sid > self.highest_stream_id:
                raise self._idle(sid, "RST_STREAM")
            return False  # already closed: may cross our own END_STREAM or RST_STREAM
        return self._listener.on_client_reset(sid)

    def _on_window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2ProtocolError("WINDOW_UPDATE of other than 4 octets", FRAME_SIZE_ERROR)
        increment = int.from_bytes(payload, "big") & MAX_WINDOW
        if not sid:
            if not increment:
                raise H2ProtocolError("WINDOW_UPDATE of 0 on the connection (RFC 9113 §6.9)")
            window = self.conn_send_window + increment
            if window > MAX_WINDOW:
                raise H2ProtocolError("connection window past 2^31-1", FLOW_CONTROL_ERROR)
            self.conn_send_window = window
            self._listener.on_window(0)
            return
        stream = self._streams.get(sid)
        if stream is None:
            if sid > self.highest_stream_id:
                raise self._idle(sid, "WINDOW_UPDATE")
            return  # a closed stream's late credit (§5.1)
        if not increment:
            self._stream_error(sid, PROTOCOL_ERROR)
            return
        window = stream.send + increment
        if window > MAX_WINDOW:
            self._stream_error(sid, FLOW_CONTROL_ERROR)
            return
        stream.send = window
        self._listener.on_window(sid)

    def _on_settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid:
            raise H2ProtocolError("SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise H2ProtocolError("SETTINGS ACK with a payload", FRAME_SIZE_ERROR)
            return
        if len(payload) % 6:
            raise H2ProtocolError("SETTINGS of other than 6-octet parameters", FRAME_SIZE_ERROR)
        window_changed = False
        for off in range(0, len(payload), 6):
            key = (payload[off] << 8) | payload[off + 1]
            value = int.from_bytes(payload[off + 2 : off + 6], "big")
            if key == S_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1", FLOW_CONTROL_ERROR)
                delta = value - self.peer_initial_window  # applies to open streams (§6.9.2)
                self.peer_initial_window = value
                if delta:
                    window_changed = True
                    for stream in self._streams.values():
                        stream.send += delta
                        if stream.send > MAX_WINDOW:
                            raise H2ProtocolError("a stream window past 2^31-1", FLOW_CONTROL_ERROR)
            elif key == S_MAX_FRAME_SIZE:
                if not 16384 <= value <= 2**24 - 1:
                    raise H2ProtocolError("SETTINGS_MAX_FRAME_SIZE out of range")
                self.peer_max_frame = value
            elif key == S_ENABLE_PUSH and value > 1:
                raise H2ProtocolError("SETTINGS_ENABLE_PUSH other than 0 or 1")
            # HEADER_TABLE_SIZE: our encoder uses no dynamic table; the rest are advisory.
        self.out.append(frame(SETTINGS, ACK, 0))
        if window_changed:
            self._listener.on_window(0)

    def _stream_error(self, sid: int, code: int) -> None:
        """RST_STREAM(``code``) for the client's violation on an open stream (§5.4.2)."""
        self.reset_stream(sid, code)
        self._listener.on_stream_error(sid)

    def _remember_reset(self, sid: int) -> None:
        reset = self._reset
        reset[sid] = None
        if len(reset) > _RESET_MEMORY:
            del reset[next(iter(reset))]

    # -- sending --------------------------------------------------------------------------------

    def take_output(self) -> bytes:
        """Everything queued to send since the last call."""
        out = self.out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    def window(self, sid: int) -> int:
        """Body bytes stream ``sid`` may send now (min of its window and the connection's)."""
        stream = self._streams.get(sid)
        if stream is None:
            return 0
        send = stream.send
        conn = self.conn_send_window
        return send if send < conn else conn

    def is_open(self, sid: int) -> bool:
        return self._streams.get(sid) is not None

    def send_headers(self, sid: int, block: bytes, end_stream: bool) -> None:
        """HEADERS (+CONTINUATION at the client's frame size) carrying ``block``."""
        stream = self._streams.get(sid)
        if stream is None:
            raise StreamClosed(sid)
        flags = END_STREAM if end_stream else 0
        limit = self.peer_max_frame
        if len(block) <= limit:
            self.out.append(frame(HEADERS, flags | END_HEADERS, sid, block))
        else:
            self.out.append(frame(HEADERS, flags, sid, block[:limit]))
            for off in range(limit, len(block), limit):
                last = off + limit >= len(block)
                self.out.append(
                    frame(CONTINUATION, END_HEADERS if last else 0, sid, block[off : off + limit])
                )
        if end_stream:
            self._local_end(sid, stream)

    def answer(self, sid: int, block: bytes, body: bytes) -> bool:
        """A whole answer, HEADERS + one DATA frame ending the stream, if both fit (the windows,
        the client's frame size); False (nothing sent) if not: then ``send_headers`` and
        ``send_data`` within the windows. One call for the common small answer."""
        stream = self._streams.get(sid)
        if stream is None:
            raise StreamClosed(sid)
        n = len(body)
        limit = self.peer_max_frame
        if n > stream.send or n > self.conn_send_window or n > limit or len(block) > limit:
            return False
        stream.send -= n
        self.conn_send_window -= n
        self.data_frames += 1
        sid_bytes = stream.sid
        # %-formatted bytes: compiled, one allocation (``CPyBytes_Build``), where a join makes a
        # tuple and takes a buffer of each part.
        self.out.append(
            b"%s%s%s%s%s%s"
            % (HEADERS_PREFIXES.of(len(block)), sid_bytes, block, DATA_END_PREFIXES.of(n), sid_bytes, body)
        )
        if stream.remote_open:
            stream.send = -(1 << 40)  # answered before the request ended (see ``_local_end``)
        else:
            self._streams.pop(sid)
        return True

    def send_data(self, sid: int, data: bytes, end_stream: bool) -> None:
        """One DATA frame; ``data`` must fit ``window(sid)`` and the client's frame size."""
        stream = self._streams.get(sid)
        if stream is None:
            raise StreamClosed(sid)
        n = len(data)
        stream.send -= n
        self.conn_send_window -= n
        self.data_frames += 1
        prefixes = DATA_END_PREFIXES if end_stream else DATA_PREFIXES
        self.out.append(b"%s%s%s" % (prefixes.of(n), stream.sid, data))
        if end_stream:
            self._local_end(sid, stream)

    def send_fitting(self, sid: int, data: bytes, end_stream: bool) -> int:
        """DATA frames of ``data`` from its start as far as the windows and the client's frame
        size allow, END_STREAM on the last if all of it went and ``end_stream`` (an empty
        ``data``: one empty frame then); the octets sent. ``window`` + ``send_data`` in one
        stream lookup, for the common case of a chunk that fits."""
        stream = self._streams.get(sid)
        if stream is None:
            raise StreamClosed(sid)
        total = len(data)
        limit = self.peer_max_frame
        offset = 0
        while offset < total:
            n = stream.send
            conn = self.conn_send_window
            if conn < n:
                n = conn
            if n <= 0:
                break
            if n > limit:
                n = limit
            if n > total - offset:
                n = total - offset
            stream.send -= n
            self.conn_send_window -= n
            self.data_frames += 1
            prefixes = DATA_END_PREFIXES if end_stream and offset + n == total else DATA_PREFIXES
            chunk = data if n == total else data[offset : offset + n]
            self.out.append(b"%s%s%s" % (prefixes.of(n), stream.sid, chunk))
            offset += n
        if offset == total and end_stream:
            if not total:
                self.data_frames += 1
                self.out.append(DATA_END_PREFIXES.of(0) + stream.sid)
            self._local_end(sid, stream)
        return offset

    def _local_end(self, sid: int, stream: _Stream) -> None:
        """We ended open stream ``sid`` (``stream``, as its caller looked it up)."""
        if not stream.remote_open:
            self._streams.pop(sid)
        else:
            # Answered before the request ended: the stream stays (half-closed, local) until
            # the client ends it or the connection resets it.
            stream.send = -(1 << 40)  # nothing more may be sent on it

    def reset_stream(self, sid: int, code: int) -> None:
        """RST_STREAM(``code``) on a stream still open (either way); nothing for a closed one."""
        if self._streams.pop(sid) is None:
            return
        self.out.append(frame(RST_STREAM, 0, sid, code.to_bytes(4, "big")))
        self._remember_reset(sid)

    def goaway(self, code: int, last_stream_id: int) -> None:
        """GOAWAY (§6.8): streams up to ``last_stream_id`` may still complete."""
        self.out.append(frame(GOAWAY, 0, 0, last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big")))
