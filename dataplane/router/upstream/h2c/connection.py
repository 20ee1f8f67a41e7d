"""One h2c upstream connection: the lean codec driven by asyncio callbacks, streams multiplexed.

Part of the h2c upstream (``upstream.h2c.pool``; the pool decides which connection a request uses).
Everything runs in the ``asyncio.Protocol`` callbacks: no task per request. The HTTP/2 framing is
``h2_codec.ClientCodec``; each request is an ``h2_stream.H2Stream``, which the protocol fills and
the router's request path reads.

Flow control (RFC 9113 §5.2), both ways:
  * download: each stream gets a ``stream_window_bytes`` window; its credit is returned only as
    the router's client consumes the chunks, so a slow reader only stops its own stream and its
    buffering is bounded by that window. Connection credit is returned on receipt (the stream
    windows already bound the buffering), so one slow stream never blocks the others.
  * upload: a body is sent as far as the peer's windows allow; the rest waits for WINDOW_UPDATE
    (or for the transport to drain) without holding back any other stream.

Failures, as the request path needs them (SPEC §5): a stream refused (RST_STREAM REFUSED_STREAM,
or above a GOAWAY's last_stream_id, or on a connection that never heard from the peer) fails with
``UpstreamUnreachable`` — the worker did not process it, so it may be retried elsewhere.
Everything else after the request went out is ``UpstreamBodyIncomplete``. A failed or GOAWAY'd
connection is never reused.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import cast

from dataplane.errors import RouterError, UpstreamBodyIncomplete, UpstreamUnreachable
from dataplane.http.h2_frames import CANCEL, NO_ERROR, REFUSED_STREAM, H2ProtocolError
from dataplane.http.stream_table import StreamTable
from dataplane.router.body import RequestBody
from dataplane.router.upstream.base import UpstreamTimeouts
from dataplane.router.upstream.deadlines import Deadlines
from dataplane.router.upstream.h2c.codec import ClientCodec
from dataplane.router.upstream.h2c.stream import H2Stream, Retrier, StreamOwner, parse_head

DEFAULT_STREAM_WINDOW = 4 * 1024 * 1024
DEFAULT_MAX_STREAMS = 256


class ConnectionPool(Retrier):
    """What a connection tells its pool (``h2c.pool.H2Pool`` extends it): a native base class,
    so the call at every stream's end is a vtable call, not a bound method's generic one."""

    def on_capacity(self, conn: H2Connection) -> None:
        """A stream slot came free on ``conn``, or ``conn`` closed."""
        raise NotImplementedError


class H2Connection(StreamOwner):
    """One h2c connection: the codec fed by asyncio callbacks; implements ``CodecListener``."""

    def __init__(
        self,
        authority: bytes,
        *,
        stream_window_bytes: int = DEFAULT_STREAM_WINDOW,
        max_streams: int = DEFAULT_MAX_STREAMS,
        pool: ConnectionPool | None = None,
        timeouts: UpstreamTimeouts | None = None,
    ) -> None:
        self.authority = authority
        self._timeouts = timeouts or UpstreamTimeouts()
        self._max_streams = max_streams
        self._pool = pool
        self._codec = ClientCodec(self, stream_window=stream_window_bytes)
        self._loop = asyncio.get_running_loop()
        # Bound once: compiled, ``self._loop.time()`` looks the method up by name at each call.
        self._clock: Callable[[], float] = self._loop.time
        self._last_block: list[tuple[bytes, bytes]] | None = None
        self._last_status = 0
        self._last_headers: list[tuple[bytes, bytes]] = []
        self._transport: asyncio.Transport | None = None
        self._streams: StreamTable[H2Stream] = StreamTable()
        self._send_blocked: dict[int, H2Stream] = {}
        self._write_paused = False
        self._peer_seen = False  # any byte from the peer: before that, nothing was processed
        self._feeding = False  # inside data_received: listeners are told after the whole read
        self._now = -1.0  # the loop's time during a read, once read (``clock``)
        self._ready: list[H2Stream] = []  # listened streams to tell once the read is decoded
        self.closed = False  # failed or lost: never reused (the pool drops it)
        self.draining = False  # GOAWAY received or sent: no new streams
        self.deadlines = Deadlines()  # of the streams in flight (``h2c.stream``), one timer
        self.credit_batch = stream_window_bytes >> 2

    # -- capacity, as the pool sees it ---------------------------------------------------------

    @property
    def active_streams(self) -> int:
        return self._streams.count

    def has_capacity(self) -> bool:
        limit = min(self._max_streams, self._codec.max_concurrent_streams)
        return not (self.closed or self.draining) and self._streams.count < limit

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self._transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # h2c with prior knowledge (RFC 9113 §3.3): the preface goes out at once.
        transport.write(self._codec.preface())

    def data_received(self, data: bytes) -> None:
        self._peer_seen = True
        self._feeding = True
        try:
            self._codec.feed(data)
        except H2ProtocolError as exc:
            self._write(self._codec.goaway(exc.code))
            self._fail(UpstreamBodyIncomplete())
        finally:
            self._feeding = False
            self._now = -1.0
            self._flush()
            if self._ready:
                self._tell_ready()

    @property
    def heard_from_peer(self) -> bool:
        """Any byte from the worker yet: a loss is then ``UpstreamBodyIncomplete``, never retried."""
        return self._peer_seen

    def connection_lost(self, exc: BaseException | None) -> None:
        self._fail(UpstreamBodyIncomplete() if self._peer_seen else UpstreamUnreachable())

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._resume_sends()
        self._flush()

    # -- requests -------------------------------------------------------------------------------

    def start(
        self,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        body: RequestBody,
        deadline: float,
        now: float | None = None,
    ) -> H2Stream:
        """Open a stream, send its headers and as much body as the windows allow.

        ``headers`` are end-to-end already (``upstream.UpstreamPool``): no connection-specific
        field (RFC 9113 §8.2.2), no Host (it travels as :authority), no framing. ``now``: the
        loop's time the caller read for ``deadline`` (else it is read here).
        """
        if self.closed or self.draining:
            raise UpstreamUnreachable()
        codec = self._codec
        try:
            sid, block = codec.open_stream(
                method, path, self.authority, headers, not body, len(body) if body else None
            )
        except H2ProtocolError as exc:  # stream ids exhausted: this connection is done
            self.draining = True
            raise UpstreamUnreachable() from exc
        loop = self._loop
        stream = H2Stream(
            self, sid, body, deadline, loop.time() if now is None else now, loop, self._timeouts
        )
        self._streams.put(sid, stream)
        transport = self._transport
        assert transport is not None
        if body and not self._write_paused:
            n = min(codec.sendable(sid), len(body))
            if n == len(body):
                # The common case: headers and the whole body in one write.
                transport.write(codec.data(sid, body, 0, n, True, prefix=block))
                stream.pending_off = n
                return stream
            transport.write(block)
            self._send_body(stream)
        else:
            transport.write(block)
            if body:
                self._send_blocked[sid] = stream
        return stream

    def _send_body(self, stream: H2Stream) -> None:
        sid = stream.stream_id
        if self._write_paused:
            self._send_blocked[sid] = stream
            return
        codec = self._codec
        body = stream.pending
        off = stream.pending_off
        total = len(body)
        n = min(codec.sendable(sid), total - off)
        if n > 0:
            self._write(codec.data(sid, body, off, off + n, off + n == total))
            off += n
        stream.pending_off = off
        if off < total:
            self._send_blocked[sid] = stream
        else:
            self._send_blocked.pop(sid, None)

    def _resume_sends(self) -> None:
        if self._send_blocked:
            for stream in list(self._send_blocked.values()):
                self._send_body(stream)

    def fail_stalled(self, since: float) -> int:
        """Time out the streams that have had nothing from the worker since ``since``."""
        stalled = [s for s in self._streams.values() if s.stalled_since(since)]
        for stream in stalled:
            stream.time_out()
        return len(stalled)

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """The router's client took ``nbytes``: return that credit to the peer (RFC 9113 §6.9)."""
        if self.closed or nbytes <= 0:
            return
        self._codec.consumed(stream_id, nbytes)
        self._flush()

    def cancel(self, stream: H2Stream, code: int = CANCEL) -> None:
        """Stop a stream the router no longer wants (client gone, timeout): RST_STREAM."""
        sid = stream.stream_id
        if self._streams.pop(sid) is None:
            return
        self._send_blocked.pop(sid, None)
        if not self.closed:
            self._write(self._codec.reset(sid, code))
        self._released_or_closed()

    def close(self) -> None:
        """Send GOAWAY and close; open streams fail as incomplete."""
        if self._transport is None or self.closed:
            return
        self.draining = True
        self._write(self._codec.goaway(NO_ERROR))
        self._fail(UpstreamBodyIncomplete())

    # -- CodecListener --------------------------------------------------------------------------

    def on_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if not stream.started:
            # The codec hands back the same list for a repeated header block: parse it once.
            if headers is not self._last_block:
                self._last_block = headers
                self._last_status, self._last_headers = parse_head(headers)
            stream.head_received(self._last_status, self._last_headers)
        if end_stream:  # a header-only answer, or trailers (ignored: nothing to forward them to)
            self._ended(stream)

    def on_data(self, stream_id: int, data: bytes, flow_controlled: int, end_stream: bool) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.data_received(data, flow_controlled, end_stream)
        if end_stream:
            self._ended(stream)

    def on_reset(self, stream_id: int, code: int) -> None:
        stream = self._finished(stream_id)
        if stream is None:
            return
        # REFUSED_STREAM guarantees the worker did no work on it (RFC 9113 §8.7): retryable.
        refused = code == REFUSED_STREAM and not stream.started
        if refused:
            stream.refused = True
        stream.fail(UpstreamUnreachable() if refused else UpstreamBodyIncomplete())

    def on_goaway(self, last_stream_id: int, code: int) -> None:
        # RFC 9113 §6.8: streams above last_stream_id were not processed (retryable); those at or
        # below it may still complete, so a graceful GOAWAY keeps the connection reading.
        self.draining = True
        for sid in [sid for sid, _ in self._streams.items() if sid > last_stream_id]:
            stream = self._finished(sid)
            if stream is not None:
                stream.refused = True
                stream.fail(UpstreamUnreachable())
        if code != NO_ERROR or not self._streams.count:
            self._fail(UpstreamBodyIncomplete())
        else:
            self._released()

    def on_window(self) -> None:
        self._resume_sends()

    def on_settings(self) -> None:
        self._resume_sends()
        self._released()  # MAX_CONCURRENT_STREAMS may have grown

    def clock(self) -> float:
        now = self._now
        if now < 0.0:
            now = self._clock()
            if self._feeding:
                self._now = now
        return now

    def notify(self, stream: H2Stream) -> None:
        """A listened stream has news (``H2Stream._wake``): told after the read being decoded, so
        a head and the body that came with it are one answer; told now outside a read."""
        if self._feeding:
            self._ready.append(stream)
        else:
            stream.deliver()

    # -- internals ------------------------------------------------------------------------------

    def _tell_ready(self) -> None:
        # Nothing is added meanwhile (outside a read a stream is told at once, ``notify``).
        ready = self._ready
        try:
            for stream in ready:
                stream.deliver()  # a stream listed twice is told once (deliver forgets the listener)
        finally:
            ready.clear()

    def _ended(self, stream: H2Stream) -> None:
        sid = stream.stream_id
        if stream.pending_off < len(stream.pending):
            # The worker answered before reading our whole body: stop sending (RFC 9113 §8.1).
            self._write(self._codec.reset(sid, NO_ERROR))
        self._finished(sid)
        stream.ended()

    def _write(self, data: bytes | bytearray) -> None:
        if data and self._transport is not None and not self.closed:
            self._transport.write(data)

    def _flush(self) -> None:
        data = self._codec.take_output()
        if data and self._transport is not None and not self.closed:
            self._transport.write(data)

    def _released_or_closed(self) -> None:
        # A draining connection closes once its last stream is done (RFC 9113 §6.8).
        if self.draining and not self._streams.count and not self.closed:
            self._fail(UpstreamBodyIncomplete())
        else:
            self._released()

    def _released(self) -> None:
        if self._pool is not None:
            self._pool.on_capacity(self)

    def _fail(self, error: RouterError) -> None:
        if self.closed:
            return
        self.closed = True
        streams = self._streams.take_all()
        self._send_blocked.clear()
        for stream in streams:
            stream.fail(error)
        self.deadlines.cancel()  # nothing left to watch: drop the timer now
        if self._transport is not None:
            self._transport.close()
        self._released()

    def _finished(self, sid: int) -> H2Stream | None:
        stream = self._streams.pop(sid)
        if self._send_blocked:
            self._send_blocked.pop(sid, None)
        self._codec.forget(sid)
        if stream is not None:
            self._released_or_closed()
        return stream
