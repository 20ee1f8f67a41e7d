"""A lean client-side HTTP/2 codec (RFC 9113) for the h2c upstream: bytes in, callbacks out, no I/O.

Why not the ``h2`` library on the hot path: measured here, its per-request client work (HPACK
encoding with a dynamic table, per-frame objects, stream state machines, validation) costs several
hundred µs, more than the whole HTTP/1.1 hop. A router talking to its own workers needs a small
subset of HTTP/2, so this codec does only that, directly on bytes:

* requests go out as HEADERS (+CONTINUATION) with HPACK "literal without indexing" / static-table
  fields (RFC 7541 §6.1, §6.2.2): no encoder state, so nothing to keep in sync with the peer
  (the sending half and the windows: ``h2c.output``);
* responses are decoded with ``dataplane.http.h2_hpack`` (the peer may use its dynamic table and
  Huffman; the ``hpack`` library's decoder is pure Python and cost ~28 µs per block), a block
  repeated while the table stands decoded once (``BlockDecoder``);
* flow control both ways (RFC 9113 §5.2, §6.9): send windows per stream and connection, receive
  credit returned per stream only as the consumer reads (``consumed``), connection credit at once;
* SETTINGS (acknowledged), PING (answered), GOAWAY, RST_STREAM, WINDOW_UPDATE; PRIORITY and
  unknown frame types are ignored (§5.5); PUSH_PROMISE is refused by SETTINGS_ENABLE_PUSH=0.

A violation raises ``H2ProtocolError``: the caller fails the connection, never reuses it.
"""

from __future__ import annotations

from mypy_extensions import i64, mypyc_attr

from dataplane.http.h2_frames import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PADDED,
    PING,
    PUSH_PROMISE,
    RECV_FRAME_SIZE,
    RST_STREAM,
    S_INITIAL_WINDOW_SIZE,
    S_MAX_CONCURRENT_STREAMS,
    S_MAX_FRAME_SIZE,
    SETTINGS,
    WINDOW_UPDATE,
    H2ProtocolError,
    frame,
    header_block,
)
from dataplane.http.h2_hpack import BlockDecoder, HpackError
from dataplane.router.upstream.h2c.output import CodecOutput


# Compiled (scripts/build_mypyc.sh), a native base class rather than a Protocol: the codec's
# calls (two per answer) are vtable calls, not lookups by name with boxed arguments
# (``h2c.stream.StreamOwner``, which ``H2Connection`` extends, extends it). Test listeners are
# interpreted subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class CodecListener:
    """What the connection does with decoded frames (called from ``ClientCodec.feed``)."""

    def on_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        raise NotImplementedError

    def on_data(self, stream_id: int, data: bytes, flow_controlled: int, end_stream: bool) -> None:
        raise NotImplementedError

    def on_reset(self, stream_id: int, code: int) -> None:
        raise NotImplementedError

    def on_goaway(self, last_stream_id: int, code: int) -> None:
        raise NotImplementedError

    def on_window(self) -> None:
        raise NotImplementedError

    def on_settings(self) -> None:
        raise NotImplementedError


class ClientCodec(CodecOutput):
    """The connection-wide HTTP/2 state of one client connection; see the module docstring."""

    def __init__(self, listener: CodecListener, *, stream_window: int = 4 << 20) -> None:
        super().__init__(stream_window=stream_window)
        self._listener = listener
        self._decoder = BlockDecoder()
        self._buf = b""
        self._conn_recv_unacked = 0
        self._continuation: tuple[int, int, bytearray] | None = None  # (stream, flags, block)

    def feed(self, data: bytes) -> None:
        """Decode every complete frame in ``data`` (plus what was left over), calling the listener."""
        buf = self._buf + data if self._buf else data
        # Native 64-bit ints for the offsets and the header's fields: compiled, each step of a
        # plain ``int`` checks for a boxed one.
        size: i64 = len(buf)
        pos: i64 = 0
        length: i64
        end: i64
        sid: i64
        while size - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            end = pos + 9 + length
            if length > RECV_FRAME_SIZE:
                raise H2ProtocolError("frame larger than SETTINGS_MAX_FRAME_SIZE", FRAME_SIZE_ERROR)
            if end > size:
                break
            kind = buf[pos + 3]
            flags = buf[pos + 4]
            # Byte by byte, not int.from_bytes (compiled, a call by name on a new slice).
            sid = (
                (buf[pos + 5] & 0x7F) << 24 | buf[pos + 6] << 16 | buf[pos + 7] << 8 | buf[pos + 8]
            )  # the reserved bit dropped (RFC 9113 §4.1)
            payload = buf[pos + 9 : end]
            pos = end
            if self._continuation is not None and kind != CONTINUATION:
                raise H2ProtocolError("frame interleaved in a header block")
            if kind == DATA:
                self._on_data(sid, flags, payload, length)
            elif kind == HEADERS:
                self._on_headers(sid, flags, payload)
            elif kind == CONTINUATION:
                self._on_continuation(sid, flags, payload)
            elif kind == SETTINGS:
                self._on_settings(sid, flags, payload)
            elif kind == WINDOW_UPDATE:
                self._on_window_update(sid, payload)
            elif kind == RST_STREAM:
                if sid == 0 or length != 4:
                    raise H2ProtocolError("malformed RST_STREAM", FRAME_SIZE_ERROR)
                self.forget(sid)
                self._listener.on_reset(sid, int.from_bytes(payload, "big"))
            elif kind == PING:
                if length != 8 or sid != 0:
                    raise H2ProtocolError("malformed PING", FRAME_SIZE_ERROR)
                if not flags & ACK:
                    self._out.append(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                if sid != 0 or length < 8:
                    raise H2ProtocolError("malformed GOAWAY", FRAME_SIZE_ERROR)
                last = int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
                self._listener.on_goaway(last, int.from_bytes(payload[4:8], "big"))
            elif kind == PUSH_PROMISE:
                raise H2ProtocolError("PUSH_PROMISE with SETTINGS_ENABLE_PUSH=0")
            # PRIORITY and unknown types: ignored (RFC 9113 §5.5, §6.3).
        self._buf = buf[pos:] if pos < size else b""

    def _on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        if sid == 0:
            raise H2ProtocolError("DATA on stream 0")
        # Connection credit goes back at once (per-stream windows bound the buffering).
        self._conn_recv_unacked += length
        if self._conn_recv_unacked >= 1 << 30:
            self._out.append(frame(WINDOW_UPDATE, 0, 0, self._conn_recv_unacked.to_bytes(4, "big")))
            self._conn_recv_unacked = 0
        if flags & PADDED:
            pad = payload[0] if payload else 0
            if pad >= len(payload):
                raise H2ProtocolError("padding exceeds DATA payload")
            payload = payload[1 : len(payload) - pad]
        windows = self._windows.get(sid)
        if windows is None:
            return  # a stream we reset or finished: only the connection window counted it
        windows.recv -= length
        if windows.recv < 0:
            raise H2ProtocolError("peer overran a stream window", FLOW_CONTROL_ERROR)
        end = bool(flags & END_STREAM)
        if end:
            self._windows.pop(sid)
        self._listener.on_data(sid, payload, length, end)

    def _on_headers(self, sid: int, flags: int, payload: bytes) -> None:
        block = header_block(sid, flags, payload)
        if flags & END_HEADERS:
            self._headers_done(sid, flags, block)
        else:
            self._continuation = (sid, flags, bytearray(block))

    def _on_continuation(self, sid: int, flags: int, payload: bytes) -> None:
        pending = self._continuation
        if pending is None or pending[0] != sid:
            raise H2ProtocolError("unexpected CONTINUATION")
        pending[2].extend(payload)
        if flags & END_HEADERS:
            self._continuation = None
            self._headers_done(sid, pending[1], bytes(pending[2]))

    def _headers_done(self, sid: int, flags: int, block: bytes) -> None:
        try:
            headers = self._decoder.decode(block)
        except HpackError as exc:
            raise H2ProtocolError(f"bad header block: {exc}", COMPRESSION_ERROR) from exc
        end = bool(flags & END_STREAM)
        if self._windows.get(sid) is None:
            return  # decoded anyway: the HPACK table must stay in step with the peer's
        if end:
            self.forget(sid)
        self._listener.on_headers(sid, headers, end)

    def _on_settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid != 0:
            raise H2ProtocolError("SETTINGS on a stream")
        if flags & ACK:
            return
        if len(payload) % 6:
            raise H2ProtocolError("malformed SETTINGS", FRAME_SIZE_ERROR)
        for off in range(0, len(payload), 6):
            key = int.from_bytes(payload[off : off + 2], "big")
            value = int.from_bytes(payload[off + 2 : off + 6], "big")
            if key == S_MAX_CONCURRENT_STREAMS:
                self.max_concurrent_streams = value
            elif key == S_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ProtocolError("INITIAL_WINDOW_SIZE too large", FLOW_CONTROL_ERROR)
                delta = value - self.peer_initial_window  # applies to open streams (§6.9.2)
                self.peer_initial_window = value
                for windows in self._windows.values():
                    windows.send += delta
            elif key == S_MAX_FRAME_SIZE:
                if not 16384 <= value <= 2**24 - 1:
                    raise H2ProtocolError("MAX_FRAME_SIZE out of range")
                self.peer_max_frame = value
        self._out.append(frame(SETTINGS, ACK, 0))
        self._listener.on_settings()

    def _on_window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2ProtocolError("malformed WINDOW_UPDATE", FRAME_SIZE_ERROR)
        increment = int.from_bytes(payload, "big") & MAX_WINDOW
        if sid == 0:
            self.conn_send_window += increment
            if self.conn_send_window > MAX_WINDOW:
                raise H2ProtocolError("connection window overflow", FLOW_CONTROL_ERROR)
        else:
            windows = self._windows.get(sid)
            if windows is None:
                return
            windows.send += increment
        self._listener.on_window()
