"""HTTP/1.1 upstream: a keep-alive connection pool per worker (the connections: ``upstream.h1.connection``).

One ``H1Pool`` per worker. A request takes an idle connection (most recently used first) or
opens one, writes head and body in one go, and returns as soon as the response head is parsed.
A connection goes back to the pool when its response is complete and the worker allows
keep-alive; a connection that failed, timed out or was abandoned is closed, never reused
(ARCHITECTURE: "a failed connection stays failed").

Failure classes (``dataplane.router.upstream.base``): a connect failure, or a pooled connection found
closed before anything was written, is ``UpstreamUnreachable`` (safe to retry elsewhere); what
can go wrong after the request bytes are written is the connection's (``upstream.h1.connection``).

Besides the whole-exchange deadline, each exchange has a time-to-first-byte and an idle deadline
(``UpstreamTimeouts``, enforced by the connection with the pool's one timer).

Idle connections are dropped after ``idle_ttl_s`` (4 s: below the 5 s keep-alive of uvicorn, which
SGLang serves with) so we rarely race a server closing an idle connection while we reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from dataplane.http.wire import decimal
from dataplane.router.body import RequestBody
from dataplane.router.headers import Forwarded
from dataplane.router.upstream.base import ResponseListener, UpstreamTimeouts, UpstreamUnreachable
from dataplane.router.upstream.deadlines import Deadlines
from dataplane.router.upstream.h1.connection import (
    ConnectionHome,
    H1Connection,
    H1Response,
)

_MAX_POST_LINES: Final = 1024
# Each forwarded header name's line start (CRLF, the name, ": "), built once: one part of the
# head instead of three. Names arrive as the front door's shared objects (``wire.lower_name``),
# whose hash is kept, so the lookup is cheaper than the two parts it saves. Bounded: past it, a
# name's line start is built each time.
_LINE_STARTS: Final[dict[bytes, bytes]] = {}
_MAX_LINE_STARTS: Final = 512
_MAX_CACHED_NAME_BYTES: Final = 64


class H1Pool(ConnectionHome):
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
        timeouts: UpstreamTimeouts | None = None,
        api_key: str | None = None,
    ) -> None:
        self.host = host
        self.timeouts = timeouts or UpstreamTimeouts()
        self.port = port
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._host_line = b"\r\nhost: " + authority.encode("ascii")
        if api_key is not None:
            # The worker's key (SGLang's --api-key) rides in the line every request head starts
            # with: no per-request work (the client's own credentials were dropped, headers.py).
            self._host_line += b"\r\nauthorization: Bearer " + api_key.encode("ascii")
        # POST request lines by target, up to the content-length value (``_head``): a lookup of
        # the target (the proxy hands the same bytes object for a target: its hash is kept)
        # instead of formatting four values per request. Bounded like the proxy's target cache.
        self._post_lines: dict[bytes, bytes] = {}
        self._max_idle = max_idle
        self._idle_ttl_s = idle_ttl_s
        self._connect_timeout_s = connect_timeout_s
        # Idle connections: the one released last (``_latest``), then the older ones, most recent
        # last. The last one is kept out of the list: at low concurrency one connection goes
        # back and forth at every request, and a list emptied and filled again frees and
        # reallocates its array each time (~430 instructions per request, compiled).
        self._latest: H1Connection | None = None
        self._idle: list[H1Connection] = []
        self._closed = False
        self.deadlines = Deadlines()  # one timer for the pool, not one per request
        # The pool's connections live on one loop: bind it at first use (get_running_loop()
        # makes a getpid() syscall per call on CPython 3.11).
        self._loop: asyncio.AbstractEventLoop | None = None
        # Its ``time``, bound with it (``_now``): compiled, ``loop.time()`` looks the method up
        # by name at each call.
        self._clock: Callable[[], float] | None = None

    async def request(
        self,
        method: bytes,
        path: bytes,
        headers: Forwarded,
        body: RequestBody,
        *,
        timeout_s: float,
    ) -> H1Response:
        now = self._now()
        deadline = now + timeout_s
        conn = self._checkout(now)
        if conn is None:
            conn = await self._connect(min(self._connect_timeout_s, timeout_s))
            now = self._now()  # the head is awaited for first_byte_s from the write, not before the connect
        waiter = conn.send(self._head(method, path, headers, body), body, now, deadline)
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
        headers: Forwarded,
        body: RequestBody,
        *,
        timeout_s: float,
        listener: ResponseListener,
    ) -> H1Connection | None:
        """``request`` driven by callbacks: on an idle connection, write the request and return
        the connection (``abandon()`` it if the caller leaves before the head); ``listener`` is
        told of the head or the failure. ``None`` when no connection is idle (connecting needs
        ``request``). Raises ``UpstreamUnreachable`` like ``request``.
        """
        now = self._now()
        conn = self._checkout(now)
        if conn is None:
            return None
        conn.send_to(self._head(method, path, headers, body), body, now, now + timeout_s, listener)
        return conn

    def _head(self, method: bytes, path: bytes, headers: Forwarded, body: RequestBody) -> bytes:
        """Request line and headers (RFC 9112 §3, §6.2: the body is framed by Content-Length).
        ``headers`` as field lines (``Forwarded``) go as they are."""
        # One %-format for a POST with its client's lines, else the pieces then one join:
        # compiled (scripts/build_mypyc.sh), an in-place add per header was a new bytes object
        # each.
        if method == b"POST":
            line = self._post_lines.get(path)
            if line is None:
                line = b"POST %s HTTP/1.1%s\r\ncontent-length: " % (path, self._host_line)
                if len(self._post_lines) >= _MAX_POST_LINES:
                    self._post_lines.clear()  # a client cycling targets only makes it start over
                self._post_lines[path] = line
            if isinstance(headers, bytes):
                # The common head (a client's lines forwarded as they came): %-formatted bytes,
                # compiled one allocation (``CPyBytes_Build``), no list and no join.
                return b"%s%s%s\r\n\r\n" % (line, decimal(len(body)), headers)
            parts = [line, decimal(len(body))]
        elif body or method != b"GET":
            parts = [b"%s %s HTTP/1.1%s\r\ncontent-length: %d" % (method, path, self._host_line, len(body))]
        else:
            parts = [b"%s %s HTTP/1.1%s" % (method, path, self._host_line)]
        if isinstance(headers, bytes):
            parts.append(headers)
        else:
            starts = _LINE_STARTS
            for name, value in headers:
                start = starts.get(name)
                if start is None:
                    start = b"\r\n" + name + b": "
                    if len(starts) < _MAX_LINE_STARTS and len(name) <= _MAX_CACHED_NAME_BYTES:
                        starts[name] = start
                parts.append(start)
                parts.append(value)
        parts.append(b"\r\n\r\n")
        return b"".join(parts)

    def fail_stalled(self, since: float) -> int:
        failed = 0
        for conn in self.deadlines:
            if isinstance(conn, H1Connection) and conn.stalled_since(since):
                conn.on_stalled()
                failed += 1
        return failed

    async def close(self) -> None:
        self._closed = True
        self.deadlines.cancel()  # in-flight exchanges keep theirs
        latest, self._latest = self._latest, None
        idle, self._idle = self._idle, []
        if latest is not None:
            idle.append(latest)
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------
    def _now(self) -> float:
        clock = self._clock
        if clock is None:
            loop = self._loop = asyncio.get_running_loop()
            clock = self._clock = loop.time
        return clock()

    def _checkout(self, now: float) -> H1Connection | None:
        """The most recently released idle connection still fresh; the stale ones met on the
        way are closed."""
        conn = self._latest  # the most recent one: usually still fresh
        if conn is not None:
            self._latest = None
        elif self._idle:
            conn = self._idle.pop()
        while conn is not None:
            if not conn.lost and now - conn.idle_since < self._idle_ttl_s:
                return conn
            conn.close()
            conn = self._idle.pop() if self._idle else None
        return None

    async def _connect(self, timeout_s: float) -> H1Connection:
        if self._closed:
            raise UpstreamUnreachable()
        loop = self._loop
        assert loop is not None  # bound by ``_now`` before any connect
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(lambda: H1Connection(self), self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamUnreachable() from exc
        return conn

    # -- connection.ConnectionHome --------------------------------------------------------
    def release(self, conn: H1Connection) -> bool:
        latest = self._latest
        if self._closed or len(self._idle) + (latest is not None) >= self._max_idle:
            return False
        if latest is not None:
            self._idle.append(latest)
        self._latest = conn
        return True

    def forget(self, conn: H1Connection) -> None:
        if self._latest is conn:
            self._latest = None
            return
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
