"""HTTP/1.1 upstream: a keep-alive connection pool per worker on ``asyncio.Protocol`` + httptools.

One ``H1Pool`` per worker. A request takes an idle connection (most recently used first) or
opens one, writes head and body in one go, and returns as soon as the response head is parsed;
the body is handed over chunk by chunk as ``data_received`` delivers it (SSE events are never
held back). A connection goes back to the pool when its response is complete and the worker
allows keep-alive; a connection that failed, timed out or was abandoned is closed, never reused
(ARCHITECTURE: "a failed connection stays failed").

Failure classes (``dataplane.router.upstream``): a connect failure, or a pooled connection found
closed before anything was written, is ``UpstreamUnreachable`` (safe to retry elsewhere). Once the
request bytes are written, a lost connection is ``UpstreamBodyIncomplete`` and the deadline is
``UpstreamTimeout``: the worker may have acted on the request, so those are never retried.

Idle connections are dropped after ``idle_ttl_s`` (4 s: below the 5 s keep-alive of uvicorn, which
SGLang serves with) so we rarely race a server closing an idle connection while we reuse it. A slow client pauses reading
from the worker once ``HIGH_WATER`` bytes are buffered (backpressure instead of unbounded memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import AsyncIterator
from typing import cast

import httptools

from dataplane.router.deadlines import Deadlines
from dataplane.router.errors import RouterError
from dataplane.router.headers import DROPPED, Headers
from dataplane.router.request_body import RequestBody, body_segments
from dataplane.router.upstream import (
    ResponseListener,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    UpstreamUnreachable,
)

HIGH_WATER = 1 << 20  # pause reading from the worker above this many unsent bytes
LOW_WATER = 1 << 18
_COALESCE_BODY_BYTES = 256 * 1024  # copy head + body into one write below this size


class H1Response:
    """The answer on one connection; implements ``upstream.UpstreamResponse``."""

    __slots__ = ("_chunks", "_conn", "_done", "_error", "_paused", "_size", "_waiter", "headers", "status")

    def __init__(self, conn: _Connection, status: int, headers: Headers) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._done = False
        self._error: RouterError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- fed by the connection -------------------------------------------------------------
    def _feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > HIGH_WATER and not self._paused:
            self._paused = True
            self._conn.pause_reading()
        if self._waiter is not None:  # a relay is waiting (never on the small-answer path)
            self._wake()

    def _finish(self, error: RouterError | None = None) -> None:
        if not self._done:
            self._done = True
            self._error = error
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- UpstreamResponse ------------------------------------------------------------------
    def buffered_body(self) -> bytes | None:
        if not self._done or self._error is not None:
            return None
        chunks = self._chunks
        if len(chunks) == 1:
            body = chunks.pop()
        else:
            body = b"".join(chunks)
            chunks.clear()
        self._size = 0
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        buf = self._chunks
        while True:
            if buf:
                # Forward whatever has arrived, at once: join what queued up while the client
                # was being written to (fewer writes, no added delay).
                chunk = buf.popleft() if len(buf) == 1 else b"".join(buf)
                buf.clear()
                self._size = 0
                if self._paused:
                    self._paused = False
                    self._conn.resume_reading()
                yield chunk
                continue
            if self._done:
                if self._error is not None:
                    raise self._error
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._error = UpstreamBodyIncomplete()
            self._conn.abort()


class _Connection(asyncio.Protocol):
    """One TCP connection to the worker, carrying one exchange at a time."""

    def __init__(self, pool: H1Pool) -> None:
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.idle_since = 0.0
        # Per exchange: told of the head by a future (``send``) or a listener (``send_to``).
        self._head_waiter: asyncio.Future[H1Response] | None = None
        self._listener: ResponseListener | None = None
        self._ready: H1Response | None = None  # head parsed, listener told after the read
        self._response: H1Response | None = None
        self._headers: Headers = []
        self.deadline = 0.0  # of the exchange in flight; enforced by the pool's one timer
        self._timed = False  # in the pool's set of exchanges with a deadline
        self._keep_alive = False
        self._delimited = False  # body length known (Content-Length or chunked)

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBodyIncomplete())
        except httptools.HttpParserError:
            self._fail(UpstreamBodyIncomplete())
        ready = self._ready
        if ready is not None:
            # Told after the whole read was parsed, so a small answer arrives complete (the
            # listener answers it in one write) and the connection is already back in the pool.
            listener = self._listener
            self._ready = self._listener = None
            if listener is not None:
                listener.on_response(ready)

    def eof_received(self) -> bool:
        self._on_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_closed()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or name == b"transfer-encoding":
            self._delimited = True
        if name not in DROPPED:
            self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # interim answer (RFC 9110 §15.2): the final one follows
            self._headers = []
            return
        self._keep_alive = self._parser.should_keep_alive()
        headers = self._headers
        self._headers = []
        response = H1Response(self, status, headers)
        self._response = response
        if self._listener is not None:
            self._ready = response
            return
        waiter = self._head_waiter
        self._head_waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        response = self._response
        if response is None:  # end of an interim (1xx) message
            return
        self._response = None
        self._delimited = False
        if self._timed:
            self._timed = False
            self._pool._deadlines.unwatch(self)
        if not response._done:  # response._finish(), inlined: the per-request path
            response._done = True
            if response._waiter is not None:
                response._wake()
        pool = self._pool
        if self._keep_alive and not self.lost and not pool._closed and len(pool._idle) < pool._max_idle:
            self.idle_since = self._loop.time()
            pool._idle.append(self)
        else:
            self.close()

    # -- exchange --------------------------------------------------------------------------
    def send(self, head: bytes, body: RequestBody, deadline: float) -> asyncio.Future[H1Response]:
        """Write the request; the future resolves with the response head.

        A plain function returning the future (not a coroutine): one frame less per request.
        """
        transport = self._writable()
        waiter: asyncio.Future[H1Response] = self._loop.create_future()
        self._head_waiter = waiter
        self._write(transport, head, body, deadline)
        return waiter

    def send_to(self, head: bytes, body: RequestBody, deadline: float, listener: ResponseListener) -> None:
        """Write the request; ``listener`` is told of the head or the failure (no future, no task)."""
        transport = self._transport  # self._writable(), inlined: the per-request path
        if self.lost or transport is None or transport.is_closing():
            self.close()
            raise UpstreamUnreachable()
        self._listener = listener
        self._write(transport, head, body, deadline)

    def abandon(self) -> None:
        """The caller of ``send_to`` is gone before the head: forget it and close the connection."""
        self._listener = self._ready = None
        self.abort()

    def _writable(self) -> asyncio.Transport:
        transport = self._transport
        if self.lost or transport is None or transport.is_closing():
            self.close()
            raise UpstreamUnreachable()
        return transport

    def _write(self, transport: asyncio.Transport, head: bytes, body: RequestBody, deadline: float) -> None:
        self.deadline = deadline
        self._timed = True
        self._pool._deadlines.watch(self, self._loop)
        if len(body) <= _COALESCE_BODY_BYTES:
            # One segment: head and body written separately cost a measured 1-3 ms at p90 on
            # loopback (the second small segment waits behind the first's ACK).
            transport.write(head + body if isinstance(body, bytes) else b"".join((head, *body.segments)))
        else:
            # A spliced body goes out segment by segment, never joined: the transport sends what
            # the socket takes at once and buffers only the rest (writelines would join them).
            transport.write(head)
            for segment in body_segments(body):
                transport.write(segment)

    def pause_reading(self) -> None:
        if self._transport is not None and not self.lost:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self.lost:
            self._transport.resume_reading()

    def abort(self) -> None:
        """Close at once without reuse (RFC 9112 §9.6: the only way to cancel an h1 exchange)."""
        self._cancel_timer()
        self.lost = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self._cancel_timer()
        self.lost = True
        if self._transport is not None:
            self._transport.close()

    def on_timeout(self) -> None:
        """The exchange passed its deadline (called by the pool's timer)."""
        self._fail(UpstreamTimeout())

    def _fail(self, error: RouterError) -> None:
        waiter, self._head_waiter = self._head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        listener, self._listener = self._listener, None
        self._ready = None
        response, self._response = self._response, None
        if response is not None:
            response._finish(error)
        self.abort()
        if listener is not None:
            listener.on_failure(error)

    def _on_closed(self) -> None:
        if self.lost and self._head_waiter is None and self._listener is None and self._response is None:
            return
        self.lost = True
        self._pool._forget(self)
        if self._response is not None and not self._delimited:
            # A body delimited by the end of the connection (RFC 9112 §6.3 rule 8) is complete.
            response, self._response = self._response, None
            self._cancel_timer()
            response._finish()
            return
        if self._head_waiter is not None or self._listener is not None or self._response is not None:
            self._fail(UpstreamBodyIncomplete())
        else:
            self.close()

    def _cancel_timer(self) -> None:
        if self._timed:
            self._timed = False
            self._pool._deadlines.unwatch(self)


class H1Pool:
    """Keep-alive HTTP/1.1 connections to one worker; implements ``upstream.UpstreamPool``."""

    protocol = "http1"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_idle: int = 256,
        idle_ttl_s: float = 4.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._host_line = b"\r\nhost: " + authority.encode("ascii")
        self._max_idle = max_idle
        self._idle_ttl_s = idle_ttl_s
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._closed = False
        self._deadlines = Deadlines()  # one timer for the pool, not one per request
        # The pool's connections live on one loop: bind it at first use (get_running_loop()
        # makes a getpid() syscall per call on CPython 3.11).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(
        self,
        method: bytes,
        path: bytes,
        headers: Headers,
        body: RequestBody,
        *,
        timeout_s: float,
    ) -> H1Response:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + timeout_s
        conn = self._checkout(now)
        if conn is None:
            conn = await self._connect(loop, min(self._connect_timeout_s, timeout_s))
        waiter = conn.send(self._head(method, path, headers, body), body, deadline)
        try:
            return await waiter
        except asyncio.CancelledError:
            # The caller gave up before the head arrived (client went away): the connection
            # is mid-exchange, so it cannot be reused.
            conn.abort()
            raise

    def start(
        self,
        method: bytes,
        path: bytes,
        headers: Headers,
        body: RequestBody,
        *,
        timeout_s: float,
        listener: ResponseListener,
    ) -> _Connection | None:
        """``request`` driven by callbacks: on an idle connection, write the request and return
        the connection (``abandon()`` it if the caller leaves before the head); ``listener`` is
        told of the head or the failure. ``None`` when no connection is idle (connecting needs
        ``request``). Raises ``UpstreamUnreachable`` like ``request``.
        """
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        idle = self._idle
        if not idle:
            return None
        conn: _Connection | None = idle.pop()  # the most recent one: usually still fresh
        assert conn is not None
        if conn.lost or now - conn.idle_since >= self._idle_ttl_s:
            conn.close()
            conn = self._checkout(now)
            if conn is None:
                return None
        conn.send_to(self._head(method, path, headers, body), body, now + timeout_s, listener)
        return conn

    def _head(self, method: bytes, path: bytes, headers: Headers, body: RequestBody) -> bytes:
        """Request line and headers (RFC 9112 §3, §6.2: the body is framed by Content-Length)."""
        # One %-format per piece: fewer intermediate objects than chained concatenation.
        if body or method != b"GET":
            head = b"%s %s HTTP/1.1%s\r\ncontent-length: %d" % (method, path, self._host_line, len(body))
        else:
            head = b"%s %s HTTP/1.1%s" % (method, path, self._host_line)
        for name, value in headers:
            head += b"\r\n%s: %s" % (name, value)
        return head + b"\r\n\r\n"

    async def close(self) -> None:
        self._closed = True
        self._deadlines.cancel()  # in-flight exchanges keep theirs
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------
    def _checkout(self, now: float) -> _Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.lost and now - conn.idle_since < self._idle_ttl_s:
                return conn
            conn.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> _Connection:
        if self._closed:
            raise UpstreamUnreachable()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(lambda: _Connection(self), self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamUnreachable() from exc
        return conn

    def _forget(self, conn: _Connection) -> None:
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
