"""The listener: ``start_server`` and ``HttpServer`` (close, drain), plus the timeout sweeper.

Timeouts are checked by one sweeper task per server instead of a timer per request: a
request only stores a deadline (a float), which keeps the per-request cost flat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from dataplane.http.context import ServerContext
from dataplane.http.http1 import Http1Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import Handler

_log = logging.getLogger("dataplane.http")


class HttpServer:
    """A running server. ``close()`` stops accepting; ``drain(grace_s)`` also finishes in-flight work."""

    def __init__(self, server: asyncio.Server, ctx: ServerContext) -> None:
        self._server = server
        self._ctx = ctx
        self._port = int(server.sockets[0].getsockname()[1]) if server.sockets else 0
        self._sweeper = ctx.loop.create_task(self._sweep(), name="http-server-sweeper")

    @property
    def port(self) -> int:
        """The bound port of the first listening socket (useful with port 0)."""
        return self._port

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._server.sockets)

    @property
    def connection_count(self) -> int:
        """Live client connections (both protocols)."""
        return len(self._ctx.connections)

    def close(self) -> None:
        """Stop accepting connections; live connections are left alone."""
        self._server.close()

    async def drain(self, grace_s: float) -> None:
        """Stop accepting, let in-flight requests finish for up to ``grace_s``, then close all.

        Idle keep-alive connections close at once; busy HTTP/1.1 connections close after their
        answers (the last one carries ``connection: close``); h2 connections get a GOAWAY and
        close once their open streams end. Whatever is left after ``grace_s`` is aborted.
        """
        self.close()
        ctx = self._ctx
        ctx.draining = True
        for conn in list(ctx.connections):
            conn.shutdown()
        if ctx.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.drained.wait(), grace_s)
        for conn in list(ctx.connections):
            conn.kill()
        await self.aclose()

    async def aclose(self) -> None:
        """Close the listener and stop the sweeper (connections are not touched)."""
        self._server.close()
        self._sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sweeper
        await self._server.wait_closed()

    async def _sweep(self) -> None:
        limits = self._ctx.limits
        interval = max(
            0.02, min(1.0, limits.read_timeout_s / 4, limits.idle_timeout_s / 4, limits.linger_s / 4)
        )
        loop = self._ctx.loop
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self._ctx.connections):
                try:
                    conn.check_timeouts(now)
                except Exception:  # a bug here must not end timeout enforcement for everyone
                    _log.exception("http timeout check failed")


def server_tls(cert: str, key: str) -> ssl.SSLContext:
    """A server context for ``cert``/``key`` (PEM) offering ALPN ``h2`` then ``http/1.1``
    (RFC 7301; RFC 9113 §3.2: h2 over TLS is chosen by ALPN); TLS 1.2 at least (RFC 9113 §9.2).
    Raises ``ssl.SSLError``/``OSError`` for unusable files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


async def start_server(
    handler: Handler,
    host: str | None = "127.0.0.1",
    port: int = 0,
    *,
    limits: ServerLimits | None = None,
    reuse_port: bool = False,
    sock: socket.socket | None = None,
    backlog: int = 1024,
    on_refusal: Callable[[bytes, int], None] | None = None,
    tls: ssl.SSLContext | None = None,
) -> HttpServer:
    """Listen on ``host:port`` (or ``sock``) and serve HTTP/1.1 and h2c with ``handler``.

    ``on_refusal(target, status)`` is called for each request the server answers itself.
    ``tls``: serve HTTPS (``server_tls``): a client that chose ``h2`` by ALPN starts with the
    HTTP/2 preface, so the same detection picks the protocol (RFC 9113 §3.2).
    """
    loop = asyncio.get_running_loop()
    ctx = ServerContext(handler=handler, limits=limits or ServerLimits(), loop=loop, on_refusal=on_refusal)

    def factory() -> Http1Connection:
        return Http1Connection(ctx)

    if sock is not None:
        server = await loop.create_server(factory, sock=sock, backlog=backlog, ssl=tls)
    else:
        server = await loop.create_server(
            factory, host, port, reuse_port=reuse_port or None, backlog=backlog, ssl=tls
        )
    return HttpServer(server, ctx)
