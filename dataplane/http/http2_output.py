"""The sending side of an h2c server connection (``http2``): answers under flow control.

Outbound data beyond the peer's window (RFC 9113 §5.2) waits in a per-stream buffer until
WINDOW_UPDATE, so one slow stream never blocks the others; streams still waiting are served
round-robin. A streaming writer waits (``write``), or is told to hold its producer back
(``send`` answers False until ``writable``), once ``h2_stream_buffer_bytes`` of its answer is
queued (``H2Responder``). Frames queued in the codec leave at once while their stream is the only
one open, else in one write per loop turn (``flush_for``, ``schedule_flush``); inside
``data_received`` at its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dataplane.http.context import ServerContext
from dataplane.http.h2_server_codec import StreamClosed
from dataplane.http.http2_responder import H2Responder, StreamHost
from dataplane.http.stream_table import StreamTable


class Http2Output(StreamHost):
    """Base of ``Http2Connection``: sending answers, stream completion, flushing, closing.

    A base class rather than an object of its own: the responders and the event handlers call
    these methods per request, and one more attribute hop each time would cost on the hot path.
    """

    # Set by ``Http2Connection.__init__`` (as ``WriteBackpressure`` declares what it uses).
    _ctx: ServerContext
    transport: asyncio.Transport | None
    _streams: StreamTable[H2Responder]
    _blocked: dict[int, H2Responder]  # answers waiting for window
    _flush_scheduled: bool
    _feeding: bool
    _deadline: float
    _goaway_sent: bool
    _peer_goaway: bool
    _answered: int
    _in_transit: int
    _now: Callable[[], float]  # the loop's clock, bound once (compiled: no lookup by name per read)
    # The transport's write and is_closing, bound once it is made (compiled, a call by name
    # looks the method up each time); ``context.unmade_write`` and ``unmade_closing`` before.
    _write_out: Callable[[bytes], object]
    _is_closing: Callable[[], bool]

    def release_body(self, resp: H2Responder) -> None:
        """``resp``'s request body is no longer held: dropped, or its answer is done."""
        held = resp._body_bytes
        if held:
            resp._body_bytes = 0
            self._ctx.body_held -= held
            if resp._body is not None:
                self._in_transit -= held
        resp._body = None

    def on_reset(self, sid: int) -> None:
        self._blocked.pop(sid, None)
        resp = self._streams.pop(sid)
        if resp is not None:
            if resp._body_bytes:
                self.release_body(resp)
            resp._mark_disconnected()
            self._maybe_idle()

    def on_window(self, sid: int) -> None:
        if sid == 0:
            for resp in list(self._blocked.values()):
                self._send_pending(resp)
        else:
            blocked = self._blocked.get(sid)
            if blocked is not None:
                self._send_pending(blocked)

    def send_body(self, resp: H2Responder, data: bytes, end: bool) -> None:
        """Send what the windows allow; queue the rest on the stream."""
        pending = resp._pending
        if pending is not None:
            pending += data
            resp._end_pending = end
            return
        sent = self.codec.send_fitting(resp._sid, data, end)
        if sent < len(data):
            resp._pending = bytearray(memoryview(data)[sent:])
            resp._end_pending = end
            self._blocked[resp._sid] = resp
        elif end:
            self.stream_done(resp)

    def _send_pending(self, resp: H2Responder) -> None:
        pending = resp._pending
        if pending is None:
            return
        codec = self.codec
        sid = resp._sid
        max_frame = codec.peer_max_frame
        try:
            while pending:
                n = codec.window(sid)
                if n <= 0:
                    break
                if n > max_frame:
                    n = max_frame
                if n > len(pending):
                    n = len(pending)
                chunk = bytes(pending[:n])
                del pending[:n]  # O(1) at the front of a bytearray
                codec.send_data(sid, chunk, resp._end_pending and not pending)
        except StreamClosed:
            self.on_reset(sid)
            return
        if not pending:
            resp._pending = None
            del self._blocked[sid]
            if resp._end_pending:
                self.stream_done(resp)
        else:
            # Round-robin: a stream that still waits goes behind the others.
            del self._blocked[sid]
            self._blocked[sid] = resp
        if resp._flow_waiter is not None and (
            resp._pending is None or len(resp._pending) <= self.limits.h2_stream_buffer_bytes
        ):
            resp._wake_flow()
        self.schedule_flush()

    def sent_whole(self, resp: H2Responder) -> None:
        self.stream_done(resp)

    def stream_done(self, resp: H2Responder) -> None:
        if resp._rst_code is not None:
            self.codec.reset_stream(resp._sid, resp._rst_code)  # nothing if the stream is closed
        if self._streams.pop(resp._sid) is not None:
            if resp._body_bytes:
                self.release_body(resp)
            self._answered += 1
            self._maybe_idle()

    def _maybe_idle(self) -> None:
        if self._streams.count:
            return
        if self._goaway_sent or self._peer_goaway or self._ctx.draining:
            self.schedule_flush()
            self.loop.call_soon(self._close_transport)
        else:
            self._deadline = self._now() + self.limits.idle_timeout_s

    def schedule_flush(self) -> None:
        """Send what the codec has queued once per loop turn (inside ``data_received``: at its
        end), the frames of several streams in one write."""
        if not self._flush_scheduled and not self._feeding:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def flush_for(self, resp: H2Responder) -> None:
        """``schedule_flush`` after ``resp`` queued frames, but at once while no other stream is
        open: then no other stream's frames could join the write within the loop turn, and a
        client sending one request at a time gets each answer without a call_soon and a loop
        turn in between."""
        if self._feeding:
            return
        streams = self._streams
        n = streams.count
        if n == 0 or (n == 1 and streams.get(resp._sid) is not None):
            self._flush()
        else:
            self.schedule_flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self.codec.out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        # Handlers may still answer after the connection started closing: drop their bytes.
        if data and not self.lost and self.transport is not None and not self._is_closing():
            self._write_out(data)

    def _close_transport(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()
