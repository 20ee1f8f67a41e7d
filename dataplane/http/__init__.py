"""fleetplane's HTTP server: HTTP/1.1 and h2c prior knowledge on one listener (SPEC §5).

Used by the router's front door and by ``engine-sim``. Protocol-level (``asyncio.Protocol``,
httptools, a lean h2 codec of our own, ``h2_server_codec``), bytes in and bytes out, works on
uvloop or plain asyncio (install the uvloop policy in the entry point, not here). Every
accepted socket gets TCP_NODELAY.

API (stable)::

    async def handler(req: Request, resp: Responder) -> None: ...   # run as a task
    def handler(req: Request, resp: Responder) -> Awaitable[None] | Deferred | None: ...
        # a plain function that answers at once and returns None costs no task; one that
        # returns an awaitable (e.g. a coroutine it made) has it run as a task; one that
        # returns DEFERRED finishes the answer later from callbacks it arranged (no task:
        # the router's forwarding path), owning the answer, its disconnect handling and its
        # bugs (answer_internal_error); spawn(loop, awaitable, req, resp) hands the rest of
        # such an answer to a guarded task
    server = await start_server(handler, "127.0.0.1", 0, limits=ServerLimits(), reuse_port=False, sock=None)
    server.port; server.connection_count
    server.close()                 # stop accepting
    await server.drain(grace_s)    # stop accepting, finish in-flight, then close everything
    await server.aclose()          # stop the listener and the sweeper (connections untouched)

``Request`` (``__slots__``): ``method: bytes``, ``path: bytes`` (raw target with query),
``headers: list[tuple[bytes, bytes]]`` (names lower-case; on h2 ``:authority`` appears as
``host`` when no ``host`` was sent, other pseudo-headers are dropped), ``body: bytes`` (whole,
at most ``max_body_bytes``; chunked or h2 trailers are ignored), ``http2: bool``;
``header(name) -> bytes | None``. A handler is called once the whole request has arrived.

``Responder`` (one per request):

- ``respond(status, headers, body)``: complete answer, ``content-length`` set by the server.
- ``start(status, headers)`` then ``await write(chunk)``… then ``end()``: streamed answer
  (HTTP/1.1 chunked, HTTP/1.0 close-delimited, h2 DATA frames). ``write`` waits while the
  client does not read (transport backpressure, h2 flow-control window) and raises
  ``ClientDisconnected`` once the client is gone.
- ``abort()``: break the answer (HTTP/1.1: close the connection; h2: RST_STREAM).
- ``started``, ``finished``, ``disconnected`` properties; ``await wait_disconnected()``;
  ``on_disconnect(callback)``: ``callback()`` runs once, synchronously, when the client goes
  away (no task or future per request; a later call replaces it, None clears it).

Header names given to the responder must be lower-case bytes; framing and connection-specific
headers (``content-length``, ``transfer-encoding``, ``connection``, ``keep-alive``, and on h2
``upgrade``, ``te``, ``proxy-connection``) are owned by the server and dropped.

Limits (``ServerLimits``): ``max_body_bytes`` (413 before buffering: an announced length is
refused at once, chunked/h2 data as soon as it passes the limit), ``max_header_bytes`` (431),
``read_timeout_s`` (first byte to last byte of a request, else 408), ``idle_timeout_s``
(keep-alive connection without a request; h2: without a stream, then GOAWAY),
``write_timeout_s`` (a ``write`` blocked that long on a client that does not read: HTTP/1.1
connection aborted, h2 stream reset, ``ClientDisconnected``), pipelining depth, h2 windows
(16 MiB stream and connection windows by default), h2 max concurrent streams.

Memory and floods: ``max_buffered_body_bytes`` bounds the request body bytes the
server holds across all connections (bodies still arriving, and those of requests not yet
answered); past it the largest bodies still arriving anywhere are refused 503
``buffers_full`` (HTTP/1.1: and the connection closes; h2: the stream is reset), so a
client trickling huge bodies loses before one sending a small request. ``max_connection_body_bytes``
bounds the bodies in transit on one h2 connection (windows advertised no larger). On h2 every frame
header is read before the codec parses it: a frame over our SETTINGS_MAX_FRAME_SIZE is a GOAWAY
(FRAME_SIZE_ERROR) at its header, and control-frame, empty-frame, PRIORITY and WINDOW_UPDATE floods
a GOAWAY(ENHANCE_YOUR_CALM) (``h2_guard``). A request line without an HTTP version (HTTP/0.9) is
a 400, one with HTTP/2.0 a 505.

A client that closes its side of the connection (EOF) counts as gone. After a client's
graceful GOAWAY its open h2 streams are still answered, then the connection closes; any other
GOAWAY ends the connection at once.

A handler that raises gets a 500 with the SPEC §5 envelope (``internal_error``) if nothing was
sent yet, else its answer is aborted; the connection keeps serving. The server's own refusals
carry the same envelope and ``x-router-error-code``: 400 ``bad_request`` (malformed request,
Content-Length with Transfer-Encoding, bad chunking), 413 ``payload_too_large`` (before the
body is buffered), 431 and 408 (``bad_request`` code) for oversized headers and requests that
do not arrive within ``read_timeout_s``. HTTP/1.1 connections close after such a refusal.
On h2 a malformed request (RFC 9113 §8.1.1: invalid or connection-specific fields, missing,
duplicated or misplaced pseudo-headers, DATA that contradicts content-length, bad trailers) is
a stream error: 400 ``bad_request``, then RST_STREAM(PROTOCOL_ERROR) while the client is still
sending; the connection and its other streams go on (``dataplane.http.h2_fields``).
"""

from __future__ import annotations

from dataplane.http.limits import ServerLimits
from dataplane.http.request import (
    DEFERRED,
    ClientDisconnected,
    Deferred,
    Handler,
    Request,
    Responder,
    answer_internal_error,
    spawn,
)
from dataplane.http.server import HttpServer, server_tls, start_server

__all__ = [
    "DEFERRED",
    "ClientDisconnected",
    "Deferred",
    "Handler",
    "HttpServer",
    "Request",
    "Responder",
    "ServerLimits",
    "answer_internal_error",
    "server_tls",
    "spawn",
    "start_server",
]
