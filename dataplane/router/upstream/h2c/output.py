"""The sending half of the h2c client codec (``h2c.codec``) and the state both halves share.

Requests go out as HEADERS (+CONTINUATION) with HPACK "literal without indexing" / static-table
fields (RFC 7541 §6.1, §6.2.2): no encoder state, so nothing to keep in sync with the peer. Send
windows are kept per stream and for the connection (RFC 9113 §5.2, §6.9); receive credit is
returned per stream only as the consumer reads (``consumed``). Bytes in, bytes out, no I/O.
"""

from __future__ import annotations

from dataplane.http.h2_frames import (
    CONTINUATION,
    DATA_END_PREFIXES,
    DATA_PREFIXES,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    HEADERS_END_PREFIXES,
    HEADERS_PREFIXES,
    MAX_STREAM_ID,
    MAX_WINDOW,
    METHOD_FIELDS,
    NO_ERROR,
    PREFACE,
    RECV_FRAME_SIZE,
    RST_STREAM,
    S_ENABLE_PUSH,
    S_INITIAL_WINDOW_SIZE,
    S_MAX_FRAME_SIZE,
    SCHEME_HTTP,
    SETTINGS,
    STATIC_NAMES,
    WINDOW_UPDATE,
    H2ProtocolError,
    content_length_field,
    frame,
    hpack_str,
    same_fields,
)
from dataplane.http.stream_table import StreamTable
from dataplane.router.body import RequestBody, body_window


class _Windows:
    """One open stream's flow-control state (one table entry per stream: one lookup, one pop),
    and its id as the last four octets of its frames' headers."""

    __slots__ = ("recv", "send", "sid", "unacked")

    def __init__(self, send: int, recv: int, sid: bytes) -> None:
        self.send = send  # what we may still send
        self.recv = recv  # what the peer may still send us
        self.unacked = 0  # consumed by the reader, credit not yet returned
        self.sid = sid


class CodecOutput:
    """Base of ``ClientCodec``: stream ids, windows, peer settings, and the frames we send.

    A base class rather than an object of its own: both halves touch the windows on every
    frame, and one more attribute hop per frame would cost on the hot path.
    """

    def __init__(self, *, stream_window: int) -> None:
        self._out: list[bytes] = []
        self.stream_window = stream_window
        self.next_stream_id = 1
        # Peer settings (RFC 9113 §6.5.2 defaults until its SETTINGS arrives).
        self.max_concurrent_streams = 2**31
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = 16384
        self.conn_send_window = DEFAULT_WINDOW
        self._windows: StreamTable[_Windows] = StreamTable()
        self._scheme_authority: dict[bytes, bytes] = {}
        # The last request's fields and their block (content-length apart): a client sends the
        # same fields again and again, and comparing them costs a fraction of encoding them.
        self._last_request: tuple[bytes, bytes, bytes] = (b"", b"", b"")  # method, path, authority
        self._last_fields: list[tuple[bytes, bytes]] = []
        self._last_block = b""

    def preface(self) -> bytes:
        """Connection preface + SETTINGS + opening the connection window to the maximum."""
        settings = b"".join(
            k.to_bytes(2, "big") + v.to_bytes(4, "big")
            for k, v in (
                (S_ENABLE_PUSH, 0),
                (S_INITIAL_WINDOW_SIZE, self.stream_window),
                (S_MAX_FRAME_SIZE, RECV_FRAME_SIZE),
            )
        )
        grow = (MAX_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big")
        return PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow)

    def take_output(self) -> bytes:
        """Everything queued to send (control frames, credit) since the last call."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    def open_stream(
        self,
        method: bytes,
        path: bytes,
        authority: bytes,
        headers: list[tuple[bytes, bytes]],
        end_stream: bool,
        content_length: int | None = None,
    ) -> tuple[int, bytes]:
        """A new stream id and its HEADERS (+CONTINUATION) bytes."""
        sid = self.next_stream_id
        if sid > MAX_STREAM_ID:
            raise H2ProtocolError("stream ids exhausted", NO_ERROR)
        self.next_stream_id = sid + 2
        last_method, last_path, last_authority = self._last_request
        if (
            method == last_method
            and path == last_path
            and authority == last_authority
            and same_fields(headers, self._last_fields)
        ):
            block = self._last_block
        else:
            block = self._encode(method, path, authority, headers)
            self._last_request = (method, path, authority)
            self._last_fields = list(headers)  # a copy: the caller may reuse its list
            self._last_block = block
        if content_length is not None:
            block += content_length_field(content_length)
        sid_bytes = sid.to_bytes(4, "big")
        self._windows.put(sid, _Windows(self.peer_initial_window, self.stream_window, sid_bytes))
        flags = END_STREAM if end_stream else 0
        limit = self.peer_max_frame
        if len(block) <= limit:
            prefixes = HEADERS_END_PREFIXES if end_stream else HEADERS_PREFIXES
            # %-formatted bytes: compiled, one allocation (``CPyBytes_Build``), no tuple.
            return sid, b"%s%s%s" % (prefixes.of(len(block)), sid_bytes, block)
        frames = [frame(HEADERS, flags, sid, block[:limit])]
        for off in range(limit, len(block), limit):
            last = off + limit >= len(block)
            frames.append(frame(CONTINUATION, END_HEADERS if last else 0, sid, block[off : off + limit]))
        return sid, b"".join(frames)

    def _encode(
        self, method: bytes, path: bytes, authority: bytes, headers: list[tuple[bytes, bytes]]
    ) -> bytes:
        """The header block of a request but its content-length, uncached."""
        method_field = METHOD_FIELDS.get(method)
        scheme_authority = self._scheme_authority.get(authority)
        if scheme_authority is None:  # one per connection: built once
            scheme_authority = SCHEME_HTTP + b"\x01" + hpack_str(authority)
            self._scheme_authority[authority] = scheme_authority
        parts = [
            method_field if method_field is not None else b"\x02" + hpack_str(method),
            scheme_authority,
            b"\x04" + hpack_str(path),
        ]
        static = STATIC_NAMES
        for name, value in headers:
            if value and (value[-1] == 0x20 or value[-1] == 0x09):
                # Trailing whitespace is no part of an HTTP/1.1 field's value (RFC 9110 §5.5;
                # llhttp keeps it), and makes an h2 field malformed (RFC 9113 §8.2.1).
                value = value.rstrip(b" \t")
            prefix = static.get(name)
            parts.append(
                prefix + hpack_str(value) if prefix else b"\x00" + hpack_str(name) + hpack_str(value)
            )
        return b"".join(parts)

    def sendable(self, stream_id: int) -> int:
        """Body bytes this stream may send now (min of its window and the connection's)."""
        windows = self._windows.get(stream_id)
        return 0 if windows is None else min(windows.send, self.conn_send_window)

    def data(
        self, stream_id: int, body: RequestBody, start: int, stop: int, end_stream: bool, prefix: bytes = b""
    ) -> bytes | bytearray:
        """``prefix`` (e.g. the HEADERS block, so both leave in one write), then DATA frames for
        bytes ``[start, stop)`` of ``body`` (which must fit ``sendable``), split at the peer's
        frame size. The body is copied once, straight from its segments into one buffer (a
        spliced body is never joined first; a frame may straddle segments): building frames and
        joining them cost 4-5x more on a 4 MiB body (allocations and page faults of the copies)."""
        n = stop - start
        windows = self._windows.get(stream_id)
        assert windows is not None  # open: ``sendable`` said how much
        windows.send -= n
        self.conn_send_window -= n
        limit = self.peer_max_frame
        prefixes = DATA_END_PREFIXES if end_stream else DATA_PREFIXES
        if n <= limit:
            window = body_window(body, start, stop)
            if isinstance(window, bytes):  # %-formatted: compiled, one allocation, no tuple
                return b"%s%s%s%s" % (prefix, prefixes.of(n), windows.sid, window)
            return b"".join((prefix, prefixes.of(n), windows.sid, window))
        sid = windows.sid
        out = bytearray(len(prefix) + n + 9 * -(-n // limit))
        out[: len(prefix)] = prefix
        pos = len(prefix)
        for off in range(start, stop, limit):
            end = min(off + limit, stop)
            size = end - off
            out[pos : pos + 5] = (prefixes if end == stop else DATA_PREFIXES).of(size)
            out[pos + 5 : pos + 9] = sid
            pos += 9
            out[pos : pos + size] = body_window(body, off, end)
            pos += size
        return out

    def reset(self, stream_id: int, code: int) -> bytes:
        """RST_STREAM for a stream we give up on (§6.4); forgets its state."""
        self.forget(stream_id)
        return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))

    def goaway(self, code: int = NO_ERROR) -> bytes:
        return frame(GOAWAY, 0, 0, (0).to_bytes(4, "big") + code.to_bytes(4, "big"))

    def forget(self, stream_id: int) -> None:
        """The stream is closed: drop its windows (later frames for it are only counted)."""
        self._windows.pop(stream_id)

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """The reader took ``nbytes`` of this stream: return the credit in batches (§6.9)."""
        windows = self._windows.get(stream_id)
        if windows is None:
            return
        pending = windows.unacked + nbytes
        if pending >= self.stream_window >> 2:
            windows.recv += pending
            windows.unacked = 0
            self._out.append(frame(WINDOW_UPDATE, 0, stream_id, pending.to_bytes(4, "big")))
        else:
            windows.unacked = pending
