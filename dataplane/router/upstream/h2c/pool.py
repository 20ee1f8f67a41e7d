"""h2c upstream: many concurrent requests multiplexed over a few connections per worker.

One ``H2Pool`` per worker (SPEC §1: ``h2c://`` or an ``http://`` worker whose ``/server_info``
says ``enable_http2``), implementing ``upstream.UpstreamPool``. It keeps up to
``max_connections`` HTTP/2 prior-knowledge connections (RFC 9113 §3.3, ``h2c.connection``) and
opens another one only when every open one is at its stream limit (the peer's
MAX_CONCURRENT_STREAMS, capped); connections draining after a GOAWAY or failed are replaced,
never reused. Flow control, GOAWAY/RST_STREAM handling and the failure classes are described in
``h2c.connection``; the framing is ``h2c.codec`` (a lean client codec: the ``h2`` library cost more
per request than the whole HTTP/1.1 hop).

Two ways in, as ``upstream.h1``: ``request`` (awaited by the request's task) and ``start`` (a
connection with a free stream slot is there: the request is written now and a listener is told
of the head, with no task: ``path.exchange``). The task, its coroutine frames and the head future
were the larger part of what the h2c upstream cost more than the HTTP/1.1 one (bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from dataplane.errors import RouterError, UpstreamTimeout, UpstreamUnreachable
from dataplane.router.body import RequestBody
from dataplane.router.headers import Forwarded, forwarded_list
from dataplane.router.upstream.base import ResponseListener, UpstreamTimeouts
from dataplane.router.upstream.h2c.connection import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_STREAM_WINDOW,
    ConnectionPool,
    H2Connection,
)
from dataplane.router.upstream.h2c.stream import H2Stream

__all__ = ["H2Connection", "H2Pool", "H2Stream"]


class H2Pool(ConnectionPool):
    """The h2c connections to one worker (implements the router's ``UpstreamPool``)."""

    protocol = "h2c"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = 4,
        max_streams_per_connection: int = DEFAULT_MAX_STREAMS,
        stream_window_bytes: int = DEFAULT_STREAM_WINDOW,
        connect_timeout_s: float = 5.0,
        timeouts: UpstreamTimeouts | None = None,
        api_key: str | None = None,
    ) -> None:
        self.host = host
        # The worker's key (SGLang's --api-key), added to every request's headers.
        self._auth: list[tuple[bytes, bytes]] = (
            [(b"authorization", b"Bearer " + api_key.encode("ascii"))] if api_key is not None else []
        )
        self._timeouts = timeouts or UpstreamTimeouts()
        self.port = port
        self._authority = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode()
        self._max_connections = max_connections
        self._max_streams = max_streams_per_connection
        self._stream_window = stream_window_bytes
        self._connect_timeout_s = connect_timeout_s
        self._conns: list[H2Connection] = []
        self._connecting: asyncio.Future[None] | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # bound on the first request
        # Its ``time``, bound with it: compiled, ``loop.time()`` looks the method up by name.
        self._clock: Callable[[], float] | None = None

    @property
    def connections(self) -> int:
        """Live connections (for tests and metrics)."""
        return sum(1 for c in self._conns if not c.closed)

    async def request(
        self,
        method: bytes,
        path: bytes,
        headers: Forwarded,
        body: RequestBody,
        *,
        timeout_s: float,
    ) -> H2Stream:
        # Bound once: get_running_loop() is a getpid() syscall per call on 3.11.
        loop = self._loop or self._bind_loop()
        deadline = loop.time() + timeout_s
        fields = forwarded_list(headers)
        if self._auth:
            fields = fields + self._auth
        conn = self._pick() or await self._acquire(deadline)
        stream = conn.start(method, path, fields, body, deadline)
        try:
            await stream.response_started()
        except UpstreamUnreachable:
            if not stream.refused:
                raise
            # The worker is alive and declined this stream unprocessed (a GOAWAY racing our
            # HEADERS, RFC 9113 §6.8, or REFUSED_STREAM §8.7): once more on this worker (on a
            # new connection if that one is draining) before the request path tries another.
            conn = self._pick() or await self._acquire(deadline)
            stream = conn.start(method, path, fields, body, deadline)
            await stream.response_started()
        return stream

    def start(
        self,
        method: bytes,
        path: bytes,
        headers: Forwarded,
        body: RequestBody,
        *,
        timeout_s: float,
        listener: ResponseListener,
    ) -> H2Stream | None:
        """Write the request now on a connection with a free stream slot that has heard from
        the worker, and return its stream (``abandon()`` it if the caller leaves before the
        head); ``listener`` is told of the head or the failure. ``None``: no such connection
        (the caller uses ``request``, which connects or waits). Raises ``UpstreamUnreachable``
        like ``request`` (nothing reached the worker).

        Only a connection the worker has spoken on: a loss there is ``UpstreamBodyIncomplete``,
        as for ``request``; on a connection still silent a loss is ``UpstreamUnreachable``,
        which the request path retries on another worker and a listener cannot.
        """
        clock = self._clock
        if clock is None:
            clock = self._bind_loop().time
        for conn in self._conns:
            if conn.has_capacity():
                break
        else:
            return None
        if not conn.heard_from_peer:
            return None
        fields = forwarded_list(headers)
        if self._auth:
            fields = fields + self._auth
        now = clock()
        stream = conn.start(method, path, fields, body, now + timeout_s, now)
        stream.listen(listener, self, (method, path, fields))
        return stream

    def retry(self, refused: H2Stream, listener: ResponseListener) -> None:
        """The worker refused a listened stream unprocessed (RFC 9113 §8.7): try once more on this
        worker in a task (a new connection may be needed), as ``request`` does; the listener is
        told how that went. ``refused.abandon()`` cancels the task."""
        loop = self._loop or self._bind_loop()
        task = loop.create_task(self._retried(refused, listener))
        refused.retried_by(task)

    async def _retried(self, refused: H2Stream, listener: ResponseListener) -> None:
        request = refused.request
        assert request is not None
        method, path, headers = request  # the worker's key already among the headers
        deadline = refused.final_deadline
        stream: H2Stream | None = None
        try:
            conn = self._pick() or await self._acquire(deadline)
            stream = conn.start(method, path, headers, refused.pending, deadline)
            await stream.response_started()
        except asyncio.CancelledError:
            if stream is not None:
                stream.abort()  # the client left (``abandon``): RST_STREAM
            raise
        except RouterError as error:
            listener.on_failure(error)
            return
        listener.on_response(stream)

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = loop = asyncio.get_running_loop()
        self._clock = loop.time
        return loop

    def _pick(self) -> H2Connection | None:
        for conn in self._conns:
            if conn.has_capacity():
                return conn
        return None

    async def _acquire(self, deadline: float) -> H2Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise UpstreamUnreachable()
            conn = self._pick()
            if conn is not None:
                return conn
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise UpstreamTimeout()
            self._conns = [c for c in self._conns if not c.closed]
            # Draining connections (GOAWAY) finish their streams but do not count against the cap.
            serving = sum(1 for c in self._conns if not c.draining)
            if self._connecting is None and serving < self._max_connections:
                return await self._open(min(remaining, self._connect_timeout_s))
            # Wait for a stream slot or for the connection being opened.
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await (self._connecting if self._connecting is not None else waiter)
            except TimeoutError:
                raise UpstreamTimeout() from None
            except UpstreamUnreachable:
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    async def _open(self, timeout_s: float) -> H2Connection:
        loop = asyncio.get_running_loop()
        opening: asyncio.Future[None] = loop.create_future()
        self._connecting = opening
        try:
            async with asyncio.timeout(timeout_s):
                _, proto = await loop.create_connection(
                    lambda: H2Connection(
                        self._authority,
                        stream_window_bytes=self._stream_window,
                        max_streams=self._max_streams,
                        pool=self,
                        timeouts=self._timeouts,
                    ),
                    self.host,
                    self.port,
                )
        except (OSError, TimeoutError) as exc:
            err = UpstreamUnreachable()
            opening.set_exception(err)
            opening.exception()  # waiters see it; nobody else must
            raise err from exc
        finally:
            self._connecting = None
        self._conns.append(proto)
        opening.set_result(None)
        return proto

    def fail_stalled(self, since: float) -> int:
        return sum(conn.fail_stalled(since) for conn in list(self._conns))

    def on_capacity(self, conn: H2Connection) -> None:
        if conn.closed:
            with contextlib.suppress(ValueError):
                self._conns.remove(conn)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(UpstreamUnreachable())
                waiter.exception()
