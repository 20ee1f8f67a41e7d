"""h2c connections (prior knowledge, RFC 9113 §3.3): an ``asyncio.Protocol`` around ``h2``.

Flow control both ways (RFC 9113 §5.2): inbound credit is returned as request data is taken
into the (``max_body_bytes``-bounded) body buffer; outbound data waits for the peer's window in
a per-stream buffer (the sending side: ``http2_output``).

Before h2 parses a byte, ``h2_guard.FrameGuard`` reads the frame headers: a frame longer than our
SETTINGS_MAX_FRAME_SIZE ends the connection with GOAWAY(FRAME_SIZE_ERROR) before its payload is
buffered, and control-frame or empty-frame floods with GOAWAY(ENHANCE_YOUR_CALM).

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
import contextlib
import logging
from typing import cast

from h2.config import H2Configuration
from h2.connection import ConnectionState
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import H2Error, ProtocolError
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from dataplane.errors import BadRequest, ErrorAnswer, error_answer
from dataplane.http.context import ServerContext, close_idle, set_nodelay, still_draining
from dataplane.http.h2_fields import (
    LenientH2Connection,
    MalformedHeaderBlock,
    MalformedRequest,
    check_trailer_fields,
    request_fields,
)
from dataplane.http.h2_guard import FrameGuard
from dataplane.http.http2_output import Http2Output
from dataplane.http.http2_responder import H2Responder
from dataplane.http.request import Request, dispatch
from dataplane.http.wire import BUFFER_FULL, CONNECTION_BUFFER_FULL, TIMED_OUT, TOO_LARGE

_log = logging.getLogger("dataplane.http")

_RESET_ALLOWANCE = 100  # client resets tolerated before the answered/reset ratio is enforced

_CONFIG = H2Configuration(
    client_side=False,
    header_encoding=None,
    # Checked per stream by ``h2_fields``: h2 would answer a malformed request with GOAWAY.
    validate_inbound_headers=False,
    normalize_inbound_headers=True,
    # Outbound headers are sanitised by ``h2_response_headers``; h2's checks would cost per answer.
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


class Http2Connection(Http2Output):
    """One h2c client connection; a stream is one request, answered by an ``H2Responder``."""

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__()
        self._ctx = ctx
        self.loop = ctx.loop
        self.limits = ctx.limits
        self._max_body = ctx.limits.max_body_bytes
        self.h2 = LenientH2Connection(config=_CONFIG)
        self.transport: asyncio.Transport | None = None
        self._streams: dict[int, H2Responder] = {}
        self._blocked: dict[int, H2Responder] = {}  # answers waiting for window
        self._flush_scheduled = False
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
        self._data_frames = 0  # DATA frames sent (the WINDOW_UPDATE flood limit is relative to them)
        self._guard = FrameGuard(ctx.limits, ctx.loop.time, self._data_frames_sent)
        self._cut = False  # ended for a framing error or a flood: input is ignored

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have the same API.
        self.transport = cast(asyncio.Transport, transport)
        set_nodelay(transport)
        self._ctx.connections.add(self)
        limits = self.limits
        h2 = self.h2
        window = max(65535, limits.max_connection_body_bytes)
        # Our settings take effect at once (streams are created with these windows); the peer
        # applies them when it reads our SETTINGS.
        h2.local_settings = Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
                # No more credit than the connection may hold of bodies still arriving (RFC
                # 9113's default window of 65535 at least; past the limit a stream is refused).
                SettingCodes.INITIAL_WINDOW_SIZE: min(limits.h2_initial_window_bytes, window),
                SettingCodes.MAX_FRAME_SIZE: limits.h2_max_frame_bytes,
                SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
                SettingCodes.ENABLE_PUSH: 0,
            },
        )
        h2.max_inbound_frame_size = limits.h2_max_frame_bytes
        h2.decoder.max_header_list_size = limits.max_header_bytes
        h2.initiate_connection()
        window = min(limits.h2_connection_window_bytes, window)
        if window > 65535:
            h2.increment_flow_control_window(window - 65535)
        self._flush()
        self._deadline = self.loop.time() + limits.idle_timeout_s
        if self._ctx.draining:  # handed over from HTTP/1.1 detection while the server drains
            self.shutdown()

    def data_received(self, data: bytes) -> None:
        if self._cut:
            return
        code = self._guard.check(data)
        if code:
            self._cut_off(code)
            return
        try:
            events = self.h2.receive_data(data)
        except ProtocolError:
            # h2 has queued a GOAWAY with the error code (RFC 9113 §5.4.1).
            self._flush()
            self._close_transport()
            return
        for ev in events:
            if isinstance(ev, DataReceived):
                self._on_data(ev)
            elif isinstance(ev, RequestReceived):
                self._on_request(ev)
            elif isinstance(ev, StreamEnded):
                self._on_stream_ended(ev.stream_id)
            elif isinstance(ev, WindowUpdated):
                self._on_window(ev.stream_id)
            elif isinstance(ev, TrailersReceived):
                self._on_trailers(ev)
            elif isinstance(ev, MalformedHeaderBlock):
                self._on_malformed_block(ev.stream_id)
            elif isinstance(ev, StreamReset):
                if self._on_client_reset(ev.stream_id):
                    return
            elif isinstance(ev, RemoteSettingsChanged):
                if SettingCodes.INITIAL_WINDOW_SIZE in ev.changed_settings:
                    self._on_window(0)
            elif isinstance(ev, ConnectionTerminated) and self._on_peer_goaway(ev.error_code):
                return
            # Pings, priority and settings acks need nothing from us.
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._ctx.remove(self)
        streams, self._streams = self._streams, {}
        self._blocked = {}
        for resp in streams.values():
            self.release_body(resp)
            resp._mark_disconnected()
        self._wake_writers()

    # -- events ---------------------------------------------------------------------------------

    def _on_peer_goaway(self, error_code: int | None) -> bool:
        """A client GOAWAY; True if the connection was closed at once.

        RFC 9113 §6.8: after a graceful GOAWAY from the client its open streams still complete.
        python-h2 refuses to send anything after any GOAWAY, so for NO_ERROR with answers still
        owed its state machine is put back to open (a server opens no streams, so nothing else
        depends on it); the connection closes when the last stream ends.
        """
        if error_code == ErrorCodes.NO_ERROR and self._streams:
            self.h2.state_machine.state = ConnectionState.SERVER_OPEN
            self._peer_goaway = True
            return False
        self._flush()
        self._close_transport()
        return True

    def _on_request(self, ev: RequestReceived) -> None:
        sid: int = ev.stream_id
        if self._peer_goaway or (self._goaway_sent and sid > self._last_stream_id):
            self.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        self._last_stream_id = max(self._last_stream_id, sid)
        self._deadline = 0.0
        try:
            method, path, headers, length = request_fields(ev.headers)
        except MalformedRequest as exc:
            resp = self._streams[sid] = H2Responder(self, sid, b"", exc.target, [])
            self._malformed(resp, exc)
            return
        resp = H2Responder(self, sid, method, path, headers)
        self._streams[sid] = resp
        resp._deadline = self.loop.time() + self.limits.read_timeout_s
        if length >= 0:
            resp._length = length
            if length > self._max_body:
                self._refuse(resp, TOO_LARGE)

    def _on_data(self, ev: DataReceived) -> None:
        sid: int = ev.stream_id
        # The data is taken into a bounded buffer (or dropped): credit it back at once.
        self.h2.acknowledge_received_data(ev.flow_controlled_length, sid)
        resp = self._streams.get(sid)
        if resp is None or resp._state or resp._body is None:
            return
        data: bytes = ev.data
        n = len(data)
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

    def _on_stream_ended(self, sid: int) -> None:
        resp = self._streams.get(sid)
        if resp is None or resp._body is None:
            return
        if resp._length >= 0 and resp._body_bytes != resp._length:
            self._malformed(resp, MalformedRequest("less DATA than content-length (RFC 9113 §8.1.1)"))
            return
        parts, resp._body = resp._body, None
        self._in_transit -= resp._body_bytes  # still held (ctx.body_held) until answered
        resp._deadline = 0.0
        body = b"" if not parts else parts[0] if len(parts) == 1 else b"".join(parts)
        request = Request(resp._method, resp._path, resp._headers, body, True)
        resp._task = dispatch(self.loop, self._ctx.handler, request, resp)

    def _on_trailers(self, ev: TrailersReceived) -> None:
        resp = self._streams.get(ev.stream_id)
        if resp is None or resp._body is None:
            return
        try:
            check_trailer_fields(ev.headers)
        except MalformedRequest as exc:
            self._malformed(resp, exc)

    def _on_malformed_block(self, sid: int) -> None:
        resp = self._streams.get(sid)
        if resp is None:
            with contextlib.suppress(H2Error):
                self.h2.reset_stream(sid, ErrorCodes.PROTOCOL_ERROR)
        elif resp._body is not None:  # else already refused: its reset follows the answer
            self._malformed(resp, MalformedRequest("header block without END_STREAM after the request's"))

    def _on_client_reset(self, sid: int) -> bool:
        """A client RST_STREAM; True if the connection was closed for abusing them.

        Rapid reset (CVE-2023-44487): every request costs handler work even when its client
        resets it at once, so a connection that resets more requests than it lets finish (and
        at least ``_RESET_ALLOWANCE`` of them) gets GOAWAY(ENHANCE_YOUR_CALM).
        """
        if sid in self._streams:
            self._client_resets += 1
            if self._client_resets >= _RESET_ALLOWANCE and self._client_resets > self._answered:
                with contextlib.suppress(H2Error):
                    self.h2.close_connection(
                        ErrorCodes.ENHANCE_YOUR_CALM, last_stream_id=self._last_stream_id
                    )
                self._close_transport()
                return True
        self.on_reset(sid)
        return False

    # -- refusals -------------------------------------------------------------------------------

    def _refuse(
        self, resp: H2Responder, answer: ErrorAnswer, rst_code: ErrorCodes = ErrorCodes.NO_ERROR
    ) -> None:
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
        self._refuse(resp, answer, ErrorCodes.PROTOCOL_ERROR)

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
        return self._data_frames

    def _cut_off(self, code: int) -> None:
        """A frame too large, or a flood (``h2_guard``): GOAWAY with ``code``, then close."""
        self._cut = True
        _log.info("h2 connection ended: %s", self._guard.reason)
        with contextlib.suppress(H2Error):
            self.h2.close_connection(code, last_stream_id=self._last_stream_id)
        self._close_transport()

    # -- Connection (server side) --------------------------------------------------------------

    def check_timeouts(self, now: float) -> None:
        if self.transport is None or self.lost:
            return
        if self._deadline and now >= self._deadline and not self._streams:
            self._stuck_size = still_draining(self.transport, self._stuck_size)
            if self._stuck_size:
                self._deadline = now + self.limits.write_timeout_s
            else:
                self._goaway_and_close()
            return
        for resp in list(self._streams.values()):
            if resp._deadline and now >= resp._deadline and resp._body is not None:
                self._refuse(resp, TIMED_OUT)
        self._flush()

    def shutdown(self) -> None:
        """Graceful GOAWAY (RFC 9113 §6.8): streams up to the last seen one still finish."""
        if self.transport is None or self.lost or self._goaway_sent:
            return
        self._goaway_sent = True
        self._flush()
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._last_stream_id
        frame.error_code = 0
        self.transport.write(frame.serialize())
        if not self._streams:
            self._goaway_and_close()

    def _goaway_and_close(self) -> None:
        with contextlib.suppress(H2Error):
            self.h2.close_connection(last_stream_id=self._last_stream_id)
        self._flush()
        if self.transport is not None and not self.transport.is_closing():
            close_idle(self.transport)

    def kill(self) -> None:
        if self.transport is not None:
            self.transport.abort()
