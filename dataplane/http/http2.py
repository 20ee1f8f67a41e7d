"""h2c connections (prior knowledge, RFC 9113 §3.3): an ``asyncio.Protocol`` around ``ServerCodec``.

The HTTP/2 framing, HPACK, stream states and windows are ``h2_server_codec`` (a lean codec of
our own: python-h2 cost 10x the rest of the front door per request); this module is what the
server does with the requests it decodes.

Flow control both ways (RFC 9113 §5.2): inbound credit is returned as request data is taken
into the (``max_body_bytes``-bounded) body buffer; outbound data waits for the peer's window in
a per-stream buffer (the sending side: ``http2_output``).

Before the codec parses a byte, ``h2_guard.FrameGuard`` reads the frame headers: a frame longer
than our SETTINGS_MAX_FRAME_SIZE ends the connection with GOAWAY(FRAME_SIZE_ERROR) before its
payload is buffered, and control-frame or empty-frame floods with GOAWAY(ENHANCE_YOUR_CALM).

Request body memory: bodies still arriving on the connection are bounded by
``max_connection_body_bytes`` (the windows we advertise are capped at it; a stream passing it is
refused 503 and reset), and every body the server holds by ``max_buffered_body_bytes``
(``ServerContext.make_room``: the largest bodies still arriving anywhere are refused first).

A malformed request (RFC 9113 §8.1.1: bad fields, pseudo-headers, a content-length that the DATA
does not match; see ``h2_fields``) is a stream error: it gets a 400 ``bad_request`` and, if
the client is still sending, RST_STREAM(PROTOCOL_ERROR); it never reaches the handler, and the
connection's other streams go on. Framing errors stay connection errors (GOAWAY).
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from dataplane.errors import BadRequest, ErrorAnswer, error_answer
from dataplane.http.context import (
    ServerContext,
    close_idle,
    set_nodelay,
    still_draining,
    unmade_closing,
    unmade_write,
)
from dataplane.http.h2_fields import MalformedRequest, check_trailer_fields, request_fields
from dataplane.http.h2_frames import (
    ENHANCE_YOUR_CALM,
    NO_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    H2ProtocolError,
)
from dataplane.http.h2_guard import FrameGuard
from dataplane.http.h2_server_codec import ServerCodec, ServerListener
from dataplane.http.http2_output import Http2Output
from dataplane.http.http2_responder import H2Responder
from dataplane.http.request import Request, dispatch
from dataplane.http.stream_table import StreamTable
from dataplane.http.wire import (
    BUFFER_FULL,
    CONNECTION_BUFFER_FULL,
    TIMED_OUT,
    TOO_LARGE,
    Headers,
    fields_as_lines,
)

_log = logging.getLogger("dataplane.http")

_RESET_ALLOWANCE = 100  # client resets tolerated before the answered/reset ratio is enforced


class Http2Connection(Http2Output):
    """One h2c client connection; a stream is one request, answered by an ``H2Responder``."""

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__()
        self._ctx = ctx
        self.loop = ctx.loop
        self.limits = ctx.limits
        self._max_body = ctx.limits.max_body_bytes
        limits = ctx.limits
        window = max(65535, limits.max_connection_body_bytes)
        # Our settings take effect at once (streams are created with these windows); the peer
        # applies them when it reads our SETTINGS.
        self.codec = ServerCodec(
            _Events(self),
            max_concurrent_streams=limits.h2_max_concurrent_streams,
            # No more credit than the connection may hold of bodies still arriving (RFC 9113's
            # default window of 65535 at least; past the limit a stream is refused).
            initial_window=min(limits.h2_initial_window_bytes, window),
            connection_window=min(limits.h2_connection_window_bytes, window),
            max_frame_size=limits.h2_max_frame_bytes,
            max_header_list_size=limits.max_header_bytes,
        )
        self.transport: asyncio.Transport | None = None
        self._write_out = unmade_write
        self._is_closing = unmade_closing
        self._streams: StreamTable[H2Responder] = StreamTable()
        self._blocked: dict[int, H2Responder] = {}  # answers waiting for window
        self._flush_scheduled = False
        self._feeding = False  # inside ``data_received``: it flushes at the end
        self._deadline = 0.0
        self._last_stream_id = 0
        self._goaway_sent = False
        self.lost = False
        self._answered = 0
        self._peer_goaway = False
        self._stuck_size = 0
        self._client_resets = 0
        self._max_held = ctx.limits.max_buffered_body_bytes
        self._max_in_transit = ctx.limits.max_connection_body_bytes
        self._in_transit = 0  # bytes of bodies still arriving on this connection
        self._now = ctx.loop.time
        self._guard = FrameGuard(ctx.limits, self._now, self._data_frames_sent)
        # Requests whose body was still arriving at the end of a read: their read deadlines are
        # armed then (``_arm_read_deadlines``), one clock read for the lot, none for a request
        # whose DATA came with its HEADERS. The first such stream, and whether there were more.
        self._to_arm: H2Responder | None = None
        self._arm_many = False
        self._cut = False  # ended for a framing error or a flood: input is ignored
        # Checked request blocks by the identity of the codec's decoded list (``on_request``),
        # the last one apart (one identity compare, no lookup).
        self._parsed: dict[int, _Checked] = {}
        self._last_checked: _Checked | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have the same API.
        self.transport = made = cast(asyncio.Transport, transport)
        self._write_out = made.write
        self._is_closing = made.is_closing
        set_nodelay(transport)
        self._ctx.connections.add(self)
        self._flush()
        self._deadline = self._now() + self.limits.idle_timeout_s
        if self._ctx.draining:  # handed over from HTTP/1.1 detection while the server drains
            self.shutdown()

    def data_received(self, data: bytes) -> None:
        if self._cut:
            return
        code = self._guard.check(data)
        if code:
            self._cut_off(code)
            return
        # Answers given while the codec feeds (a handler answering at once) leave with the
        # flush below, not one more loop turn later (``schedule_flush``).
        self._feeding = True
        try:
            self.codec.feed(data)
        except H2ProtocolError as exc:
            # A connection error (RFC 9113 §5.4.1): GOAWAY with its code, then close.
            _log.debug("h2 connection ended: %s", exc)
            self._cut = True
            self.codec.goaway(exc.code, self._last_stream_id)
            self._close_transport()
            return
        finally:
            self._feeding = False
        if self._to_arm is not None:
            self._arm_read_deadlines()
        if self.codec.out:
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._ctx.remove(self)
        streams = self._streams.take_all()
        self._blocked = {}
        for resp in streams:
            self.release_body(resp)
            resp._mark_disconnected()
        self._wake_writers()

    # -- events ---------------------------------------------------------------------------------

    def on_peer_goaway(self, code: int) -> bool:
        """A client GOAWAY; True if the connection was closed at once.

        RFC 9113 §6.8: after a graceful GOAWAY from the client its open streams still complete;
        the connection closes when the last stream ends.
        """
        if code == NO_ERROR and self._streams.count:
            self._peer_goaway = True
            return False
        self._cut = True
        self._close_transport()
        return True

    def on_request(self, sid: int, fields: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        if self._peer_goaway or (self._goaway_sent and sid > self._last_stream_id):
            self.codec.reset_stream(sid, REFUSED_STREAM)
            return
        self._last_stream_id = sid  # the codec checked that stream ids increase
        self._deadline = 0.0
        # The codec hands over the same list for a header block it decoded before (a client
        # repeats its blocks): its checked form is kept, keyed by the list's identity (the entry
        # holds the list, so its id cannot be reused meanwhile); each request gets its own copy
        # of the headers.
        checked = self._last_checked
        if checked is None or checked.fields is not fields:
            checked = self._parsed.get(id(fields))
            if checked is None or checked.fields is not fields:
                try:
                    method, path, headers, length = request_fields(fields)
                except MalformedRequest as exc:
                    resp = H2Responder(self, sid, b"", exc.target, [])
                    self._streams.put(sid, resp)
                    self._malformed(resp, exc)
                    return
                if len(self._parsed) >= 64:
                    self._parsed.clear()
                checked = self._parsed[id(fields)] = _Checked(fields, method, path, headers, length)
            self._last_checked = checked
        length = checked.length
        resp = H2Responder(self, sid, checked.method, checked.path, list(checked.headers))
        resp._lines = checked.use()
        self._streams.put(sid, resp)
        if length >= 0:
            resp._length = length
            if length > self._max_body:
                self._refuse(resp, TOO_LARGE)
                return
        if end_stream:
            self._request_ended(resp)
        else:
            resp._deadline = -1.0  # armed at the end of this read if the body is still arriving
            if self._to_arm is None:
                self._to_arm = resp
            else:
                self._arm_many = True

    def _arm_read_deadlines(self) -> None:
        """``read_timeout_s`` from now for the requests begun in this read and not complete."""
        first, self._to_arm = self._to_arm, None
        assert first is not None
        if self._arm_many:
            self._arm_many = False
            deadline = self._now() + self.limits.read_timeout_s
            for resp in self._streams.values():
                if resp._deadline < 0:
                    resp._deadline = deadline
        elif first._deadline < 0:
            first._deadline = self._now() + self.limits.read_timeout_s

    def on_data(self, sid: int, data: bytes, end_stream: bool) -> None:
        resp = self._streams.get(sid)
        if resp is None or resp._state or resp._body is None:
            return
        n = len(data)
        if n:
            size = resp._body_bytes + n
            if 0 <= resp._length < size:
                self._malformed(resp, MalformedRequest("more DATA than content-length (RFC 9113 §8.1.1)"))
                return
            if size > self._max_body:
                self._refuse(resp, TOO_LARGE)
                return
            if self._in_transit + n > self._max_in_transit:
                self._refuse(resp, CONNECTION_BUFFER_FULL)
                return
            ctx = self._ctx
            if ctx.body_held + n > self._max_held and not ctx.make_room(n, resp._body_bytes):
                self._refuse(resp, BUFFER_FULL)
                return
            ctx.body_held += n
            self._in_transit += n
            resp._body_bytes = size
            resp._body.append(data)
        if end_stream:
            self._request_ended(resp)

    def _request_ended(self, resp: H2Responder) -> None:
        """The client ended the stream: the request is complete, hand it to the handler."""
        if resp._length >= 0 and resp._body_bytes != resp._length:
            self._malformed(resp, MalformedRequest("less DATA than content-length (RFC 9113 §8.1.1)"))
            return
        parts, resp._body = resp._body, None
        assert parts is not None
        self._in_transit -= resp._body_bytes  # still held (ctx.body_held) until answered
        resp._deadline = 0.0
        body = b"" if not parts else parts[0] if len(parts) == 1 else b"".join(parts)
        request = Request(resp._method, resp._path, resp._headers, body, True, b"", resp._lines)
        resp._task = dispatch(self.loop, self._ctx.handler, request, resp)

    def on_trailers(self, sid: int, fields: list[tuple[bytes, bytes]]) -> None:
        resp = self._streams.get(sid)
        if resp is None or resp._state or resp._body is None:
            return
        try:
            check_trailer_fields(fields)
        except MalformedRequest as exc:
            self._malformed(resp, exc)
            return
        self._request_ended(resp)

    def on_malformed_block(self, sid: int) -> None:
        resp = self._streams.get(sid)
        if resp is None:
            self.codec.reset_stream(sid, PROTOCOL_ERROR)
        elif resp._body is not None:  # else already refused: its reset follows the answer
            self._malformed(resp, MalformedRequest("header block without END_STREAM after the request's"))

    def on_client_reset(self, sid: int) -> bool:
        """A client RST_STREAM; True if the connection was closed for abusing them.

        Rapid reset (CVE-2023-44487): every request costs handler work even when its client
        resets it at once, so a connection that resets more requests than it lets finish (and
        at least ``_RESET_ALLOWANCE`` of them) gets GOAWAY(ENHANCE_YOUR_CALM).
        """
        if self._streams.get(sid) is not None:
            self._client_resets += 1
            if self._client_resets >= _RESET_ALLOWANCE and self._client_resets > self._answered:
                self._cut = True
                self.codec.goaway(ENHANCE_YOUR_CALM, self._last_stream_id)
                self._close_transport()
                return True
        self.on_reset(sid)
        return False

    def on_stream_error(self, sid: int) -> None:
        self.on_reset(sid)

    # -- refusals -------------------------------------------------------------------------------

    def _refuse(self, resp: H2Responder, answer: ErrorAnswer, rst_code: int = NO_ERROR) -> None:
        """Answer before the request is complete, then ask the client to stop sending.

        RFC 9113 §8.1: after a complete answer a server may RST_STREAM with NO_ERROR.
        """
        if self._ctx.on_refusal is not None:
            self._ctx.on_refusal(resp._path, answer[0])
        self.release_body(resp)
        resp._deadline = 0.0
        resp._rst_code = rst_code
        resp.respond(*answer)

    def _malformed(self, resp: H2Responder, exc: MalformedRequest) -> None:
        """RFC 9113 §8.1.1: a malformed request is a stream error of type PROTOCOL_ERROR, and
        "a server MAY send an HTTP response prior to closing or resetting the stream": a 400
        tells the client why; RST_STREAM(PROTOCOL_ERROR) follows while it is still sending
        (a request it already ended is closed by the 400). Never forwarded (§8.1.1)."""
        answer = error_answer(BadRequest(f"malformed HTTP/2 request: {exc.reason}"))
        self._refuse(resp, answer, PROTOCOL_ERROR)

    # -- request body memory --------------------------------------------------------------------

    def largest_body(self) -> int:
        return max((r._body_bytes for r in self._streams.values() if r._body is not None), default=0)

    def shed_body(self) -> None:
        victim = max(
            (r for r in self._streams.values() if r._body is not None and r._body_bytes),
            key=lambda r: r._body_bytes,
            default=None,
        )
        if victim is not None:
            self._refuse(victim, BUFFER_FULL)
            self.schedule_flush()

    # -- floods ---------------------------------------------------------------------------------

    def _data_frames_sent(self) -> int:
        return self.codec.data_frames

    def _cut_off(self, code: int) -> None:
        """A frame too large, or a flood (``h2_guard``): GOAWAY with ``code``, then close."""
        self._cut = True
        _log.info("h2 connection ended: %s", self._guard.reason)
        self.codec.goaway(code, self._last_stream_id)
        self._close_transport()

    # -- Connection (server side) --------------------------------------------------------------

    def check_timeouts(self, now: float) -> None:
        if self.transport is None or self.lost:
            return
        if self._deadline and now >= self._deadline and not self._streams.count:
            self._stuck_size = still_draining(self.transport, self._stuck_size)
            if self._stuck_size:
                self._deadline = now + self.limits.write_timeout_s
            else:
                self._goaway_and_close()
            return
        for resp in self._streams.values():
            if resp._deadline > 0 and now >= resp._deadline and resp._body is not None:
                self._refuse(resp, TIMED_OUT)
        self._flush()

    def shutdown(self) -> None:
        """Graceful GOAWAY (RFC 9113 §6.8): streams up to the last seen one still finish."""
        if self.transport is None or self.lost or self._goaway_sent:
            return
        self._goaway_sent = True
        self.codec.goaway(NO_ERROR, self._last_stream_id)
        self._flush()
        if not self._streams.count:
            self._goaway_and_close()

    def _goaway_and_close(self) -> None:
        if not self._goaway_sent:
            self._goaway_sent = True
            self.codec.goaway(NO_ERROR, self._last_stream_id)
        self._flush()
        if self.transport is not None and not self.transport.is_closing():
            close_idle(self.transport)

    def kill(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _Checked:
    """A request header list that ``request_fields`` accepted, and what it gave."""

    __slots__ = ("fields", "headers", "length", "lines", "method", "path", "uses")

    def __init__(
        self, fields: list[tuple[bytes, bytes]], method: bytes, path: bytes, headers: Headers, length: int
    ) -> None:
        self.fields = fields  # the codec's list (kept: its identity is the key)
        self.method = method
        self.path = path
        self.headers = headers  # never handed out: each request gets a copy
        self.length = length
        # The regular fields as HTTP/1.1 field lines a proxy forwards as they are, or None
        # (``Request.lines``): encoded once the block comes again (``use``), not per request,
        # and never for a block that comes once (a request id in it, say).
        self.lines: bytes | None = None
        self.uses = 0

    def use(self) -> bytes | None:
        """Count one more request with this block; its lines from the second one on."""
        self.uses += 1
        if self.uses == 2:
            self.lines = fields_as_lines(self.headers)
        return self.lines


class _Events(ServerListener):
    """The codec's listener: each event goes to the connection's method of the same name.

    An object of its own because the connection's single native base chain is taken
    (``Http2Output`` -> ``StreamHost`` -> ``WriteBackpressure``); compiled, the codec's call and
    this one are both vtable calls (through a Protocol, the codec's was a lookup by name).
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: Http2Connection) -> None:
        self._conn = conn

    def on_request(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        self._conn.on_request(stream_id, headers, end_stream)

    def on_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        self._conn.on_data(stream_id, data, end_stream)

    def on_trailers(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._conn.on_trailers(stream_id, headers)

    def on_malformed_block(self, stream_id: int) -> None:
        self._conn.on_malformed_block(stream_id)

    def on_client_reset(self, stream_id: int) -> bool:
        return self._conn.on_client_reset(stream_id)

    def on_stream_error(self, stream_id: int) -> None:
        self._conn.on_stream_error(stream_id)

    def on_window(self, stream_id: int) -> None:
        self._conn.on_window(stream_id)

    def on_peer_goaway(self, code: int) -> bool:
        return self._conn.on_peer_goaway(code)
