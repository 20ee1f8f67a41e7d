"""The answer to one HTTP/1.1 request: framing (content-length, chunked, close-delimited) and
its place in the connection's in-order answer queue (see ``http1``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dataplane.http.request import ClientDisconnected, Responder
from dataplane.http.wire import LAST_CHUNK, Headers, body_allowed, encode_chunk, encode_h1_head

if TYPE_CHECKING:
    from dataplane.http.http1 import Http1Connection

NEW, STREAMING, DONE = 0, 1, 2
_JOIN_BODY_MAX = 64 * 1024  # below this a complete answer goes out in one write


class H1Responder(Responder):
    """The answer to one HTTP/1.1 request (see ``Responder``)."""

    __slots__ = (
        "_chunked",
        "_close",
        "_conn",
        "_head",
        "_head_waiter",
        "_http10",
        "_keep_alive",
        "_linger",
        "_nobody",
        "_pending",
        "_state",
        "_task",
    )

    def __init__(self, conn: Http1Connection, keep_alive: bool, head: bool, http10: bool) -> None:
        # Base-class state, set inline (no super() call on the per-request path).
        self._disc = False
        self._disc_waiter = None
        self._on_disc = None
        self._conn = conn
        self._keep_alive = keep_alive
        self._head = head
        self._http10 = http10
        self._state = NEW
        self._close = False
        self._chunked = False
        self._nobody = False
        self._linger = False
        self._pending: list[bytes] | None = None
        self._head_waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def _closes(self) -> bool:
        conn = self._conn
        return (
            not self._keep_alive
            or (conn._closing and conn._queue[-1] is self)
            or (conn._ctx.draining and conn._queue[-1] is self and not conn._in_message)
        )

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if conn._lost or self._disc:
            self._state = DONE
            return
        allowed = status >= 200 and status != 204 and status != 304  # body_allowed(status), inlined
        # Encode before committing: a bad status or header raises with the answer still unsent,
        # so the handler's error path can still answer 500.
        close = not self._keep_alive or ((conn._closing or conn._ctx.draining) and self._closes())
        head, close = encode_h1_head(status, headers, len(body) if allowed else None, False, close)
        self._state = DONE
        self._close = close
        if not allowed:
            conn._emit(self, head)
        else:
            if self._head or not body:
                conn._emit(self, head)
            elif len(body) <= _JOIN_BODY_MAX:
                conn._emit(self, head + body)
            else:
                conn._emit(self, head)
                conn._emit(self, body)
        conn._answer_done(self)

    def start(self, status: int, headers: Headers) -> None:
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if conn._lost or self._disc:
            self._state = STREAMING
            return
        close = self._closes()
        nobody = self._head or not body_allowed(status)
        chunked = not nobody and not self._http10
        if not nobody and self._http10:
            close = True  # HTTP/1.0 has no chunking: closing the connection ends the body
        head, self._close = encode_h1_head(status, headers, None, chunked, close)
        self._state = STREAMING
        self._chunked = chunked
        self._nobody = nobody
        conn._emit(self, head)

    async def write(self, chunk: bytes) -> None:
        if self._state != STREAMING:
            raise RuntimeError("write() needs start() first and no end()")
        if self._disc:
            raise ClientDisconnected
        if not chunk or self._nobody:
            return
        conn = self._conn
        if conn._queue[0] is not self:
            await self._wait_head()
        transport = conn._transport
        assert transport is not None
        transport.write(encode_chunk(chunk) if self._chunked else chunk)
        if conn._write_paused:
            await conn._wait_writable()

    def end(self) -> None:
        if self._state == DONE:
            return
        if self._state != STREAMING:
            raise RuntimeError("end() needs start() first")
        self._state = DONE
        conn = self._conn
        if conn._lost or self._disc:
            return
        if self._chunked:
            conn._emit(self, LAST_CHUNK)
        conn._answer_done(self)

    def abort(self) -> None:
        if self._state == DONE:
            return
        self._state = DONE
        self._close = True
        conn = self._conn
        if not conn._lost and not self._disc:
            conn._answer_done(self)

    @property
    def started(self) -> bool:
        return self._state != NEW

    @property
    def finished(self) -> bool:
        return self._state == DONE

    async def _wait_head(self) -> None:
        fut = self._head_waiter = self._conn._loop.create_future()
        await fut
        if self._disc:
            raise ClientDisconnected

    def _wake_head(self) -> None:
        fut = self._head_waiter
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _mark_disconnected(self) -> None:
        self._notify_disconnect()
        self._wake_head()
