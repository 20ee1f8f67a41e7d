"""One h2 stream: its request while it arrives, then its answer as HEADERS and DATA frames sent
within the peer's flow-control windows by the connection (see ``http2``).
"""

from __future__ import annotations

import asyncio
from typing import Final

from dataplane.http.backpressure import WriteBackpressure
from dataplane.http.h2_frames import INTERNAL_ERROR
from dataplane.http.h2_server_codec import ServerCodec, StreamClosed, encode_response
from dataplane.http.request import ClientDisconnected, Responder
from dataplane.http.wire import Headers, body_allowed

# The answer's state (``Final``: compiled, constants rather than global lookups).
NEW: Final = 0
STREAMING: Final = 1
DONE: Final = 2


class StreamHost(WriteBackpressure):
    """What a stream's answer needs from its connection (``http2.Http2Connection``, whose
    sending half ``http2_output.Http2Output`` implements this): the codec, sending within the
    flow-control windows, and the write backpressure of the socket (``WriteBackpressure``).

    A base class rather than a Protocol: compiled (scripts/build_mypyc.sh), a Protocol-typed
    reference makes every attribute read and call a generic lookup by name; through a native
    base class they are field reads and vtable calls.
    """

    codec: ServerCodec

    def send_body(self, resp: H2Responder, data: bytes, end: bool) -> None:
        """DATA for ``resp`` within the windows; the rest waits for WINDOW_UPDATE."""
        raise NotImplementedError

    def stream_done(self, resp: H2Responder) -> None:
        """``resp`` is complete (its END_STREAM is out or queued)."""
        raise NotImplementedError

    def sent_whole(self, resp: H2Responder) -> None:
        """``resp``'s answer went out whole (``ServerCodec.answer``): one DATA frame, complete."""
        raise NotImplementedError

    def on_reset(self, sid: int) -> None:
        """Stream ``sid`` is gone (reset by either side)."""
        raise NotImplementedError

    def schedule_flush(self) -> None:
        """Send what the codec has queued, once per loop iteration."""
        raise NotImplementedError

    def flush_for(self, resp: H2Responder) -> None:
        """``schedule_flush`` after ``resp`` queued frames (at once if no other stream is open)."""
        raise NotImplementedError


class H2Responder(Responder):
    """One h2 stream: its request while it arrives, then its answer (see ``Responder``)."""

    __slots__ = (
        "_body",
        "_body_bytes",
        "_conn",
        "_deadline",
        "_end_pending",
        "_flow_waiter",
        "_head",
        "_headers",
        "_length",
        "_lines",
        "_method",
        "_path",
        "_pending",
        "_rst_code",
        "_sid",
        "_state",
        "_task",
    )

    def __init__(self, conn: StreamHost, sid: int, method: bytes, path: bytes, headers: Headers) -> None:
        # Base-class state, set inline (no super() call on the per-request path).
        self._disc = False
        self._disc_waiter = None
        self._on_disc = None
        self.method = method
        self.error_code = None
        self.client_name = None
        self.upstream = None
        self._conn = conn
        self._sid = sid
        self._method = method
        self._path = path
        self._headers = headers
        self._lines: bytes | None = None  # the request's ``Request.lines`` (set by the connection)
        self._head = method == b"HEAD"
        self._body: list[bytes] | None = []
        self._body_bytes = 0
        self._length = -1  # the request's content-length, -1 if none (checked by the connection)
        self._state = NEW
        self._deadline = 0.0
        self._pending: bytearray | None = None
        self._end_pending = False
        self._rst_code: int | None = None  # RST_STREAM after a complete early answer
        self._flow_waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if self._disc or conn.lost:
            self._state = DONE
            return
        allowed = body_allowed(status)
        # Built before committing: a bad header raises with the answer still unsent.
        block = encode_response(status, headers, len(body) if allowed else None)
        self._state = DONE
        codec = conn.codec
        try:
            if not allowed or self._head or not body:
                codec.send_headers(self._sid, block, True)
                conn.stream_done(self)
            elif codec.answer(self._sid, block, body):
                conn.sent_whole(self)
            else:
                codec.send_headers(self._sid, block, False)
                conn.send_body(self, body, True)
        except StreamClosed:
            conn.on_reset(self._sid)
        conn.flush_for(self)

    def start(self, status: int, headers: Headers) -> None:
        self.start_sending(status, headers, b"")

    async def write(self, chunk: bytes) -> None:
        if self._state != STREAMING:
            raise RuntimeError("write() needs start() first and no end()")
        if not self.send(chunk):
            await self.writable()

    # -- sending from callbacks (``Responder.sends_now``; ``router.path.relay.StreamRelay``) --

    @property
    def sends_now(self) -> bool:
        return True

    def send(self, chunk: bytes) -> bool:
        """DATA within the windows now, the rest queued on the stream (RFC 9113 §5.2); False
        once more than ``h2_stream_buffer_bytes`` waits for the client's credit or the socket
        is paused: the caller holds its producer back until ``writable()``, so a client that
        opens no window holds the worker back instead of growing the queue."""
        if self._state != STREAMING:
            raise RuntimeError("send() needs start() first and no end()")
        if self._disc:
            raise ClientDisconnected
        if not chunk or self._head:
            return True
        conn = self._conn
        try:
            conn.send_body(self, chunk, False)
        except StreamClosed:
            conn.on_reset(self._sid)
            raise ClientDisconnected from None
        conn.flush_for(self)
        return self._takes_more(conn)

    def start_sending(self, status: int, headers: Headers, first: bytes) -> bool:
        """HEADERS and the first DATA in one write."""
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if self._disc or conn.lost:
            self._state = STREAMING
            if first:
                raise ClientDisconnected  # as ``send(first)`` would
            return True
        block = encode_response(status, headers, None)
        self._state = STREAMING
        if not body_allowed(status):
            self._head = True  # nothing may follow the headers; end() closes the stream
        try:
            conn.codec.send_headers(self._sid, block, False)
            if first and not self._head:
                conn.send_body(self, first, False)
        except StreamClosed:
            conn.on_reset(self._sid)
            if first:
                raise ClientDisconnected from None
            return True
        conn.flush_for(self)
        return self._takes_more(conn)

    def send_last(self, last: bytes) -> None:
        """The last DATA with END_STREAM (queued behind flow control if need be), one write."""
        if self._state != STREAMING:
            raise RuntimeError("send_last() needs start() first and no end()")
        self._state = DONE
        conn = self._conn
        if self._disc or conn.lost:
            return
        try:
            conn.send_body(self, b"" if self._head else last, True)
        except StreamClosed:
            conn.on_reset(self._sid)
            return
        conn.flush_for(self)

    def _takes_more(self, conn: StreamHost) -> bool:
        pending = self._pending
        if pending is not None and len(pending) > conn.limits.h2_stream_buffer_bytes:
            return False
        return not conn.write_paused

    async def writable(self) -> None:
        conn = self._conn
        if self._disc:
            raise ClientDisconnected
        pending = self._pending
        if pending is not None and len(pending) > conn.limits.h2_stream_buffer_bytes:
            fut = self._flow_waiter = conn.loop.create_future()
            try:
                await asyncio.wait_for(fut, conn.limits.write_timeout_s)
            except TimeoutError:
                # The client gave this stream no credit for too long: reset it (RFC 9113 §5.2.2
                # leaves it to the server to bound a stalled stream).
                self.abort()
                raise ClientDisconnected from None
            finally:
                self._flow_waiter = None
        while conn.write_paused:
            if self._disc or conn.lost:
                raise ClientDisconnected
            await conn.wait_writable()
        if self._disc:
            raise ClientDisconnected

    def end(self) -> None:
        if self._state == DONE:
            return
        if self._state != STREAMING:
            raise RuntimeError("end() needs start() first")
        self._state = DONE
        conn = self._conn
        if self._disc or conn.lost:
            return
        if self._pending is not None:
            self._end_pending = True
            return
        try:
            conn.codec.send_data(self._sid, b"", True)
        except StreamClosed:
            conn.on_reset(self._sid)
            return
        conn.stream_done(self)
        conn.flush_for(self)

    def abort(self) -> None:
        if self._state == DONE and self._pending is None:
            return
        self._state = DONE
        conn = self._conn
        if self._disc or conn.lost:
            return
        conn.codec.reset_stream(self._sid, INTERNAL_ERROR)
        conn.on_reset(self._sid)
        conn.flush_for(self)

    @property
    def started(self) -> bool:
        return self._state != NEW

    @property
    def finished(self) -> bool:
        return self._state == DONE

    def _wake_flow(self) -> None:
        fut = self._flow_waiter
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _mark_disconnected(self) -> None:
        self._notify_disconnect()
        self._wake_flow()
