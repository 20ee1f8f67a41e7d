"""The answer to one HTTP/1.1 request: framing (content-length, chunked, close-delimited) and
its place in the connection's in-order answer queue (see ``http1``).
"""

from __future__ import annotations

import asyncio
from typing import Final

from dataplane.http.backpressure import WriteBackpressure
from dataplane.http.context import ServerContext
from dataplane.http.request import ClientDisconnected, Responder
from dataplane.http.wire import LAST_CHUNK, Headers, body_allowed, encode_chunk, encode_h1_head

# Final: compiled (scripts/build_mypyc.sh), a module constant that is not Final is a dict
# lookup in the module's globals at every use.
NEW: Final = 0
STREAMING: Final = 1
DONE: Final = 2
JOIN_BODY_MAX: Final = 64 * 1024  # below this a complete answer goes out in one write


class AnswerQueue(WriteBackpressure):
    """What an answer needs from its connection (``http1.Http1Connection``): answers go out in
    request order, only the queue's head writes to the socket (RFC 9112 §9.3.2).

    A base class the connection extends rather than a Protocol: compiled
    (scripts/build_mypyc.sh), a Protocol-typed reference makes every attribute read and call a
    generic lookup by name; through a native base class they are field reads and vtable calls.
    """

    # And from WriteBackpressure: lost, loop, write_paused, wait_writable().
    closing: bool  # no further request is dispatched
    ctx: ServerContext  # ctx.draining: the server is shutting down
    transport: asyncio.Transport | None

    def closes_after(self, resp: H1Responder) -> bool:
        """Whether the connection closes once ``resp`` (not keep-alive itself) is sent."""
        raise NotImplementedError

    def is_head(self, resp: H1Responder) -> bool:
        """Whether ``resp`` is the answer now being written."""
        raise NotImplementedError

    def emit(self, resp: H1Responder, data: bytes) -> None:
        """Write ``data`` of ``resp`` now if it is the head, else keep it until it is."""
        raise NotImplementedError

    def sends(self, resp: H1Responder, data: bytes) -> bool:
        """``emit``, and whether more may be sent at once: written, and writing not paused."""
        raise NotImplementedError

    def answer_done(self, resp: H1Responder) -> None:
        """``resp`` is complete: advance the queue."""
        raise NotImplementedError


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

    def __init__(self, conn: AnswerQueue, keep_alive: bool, method: bytes, http10: bool) -> None:
        # Base-class state, set inline (no super() call on the per-request path).
        self._disc = False
        self._disc_waiter = None
        self._on_disc = None
        self.method = method
        self.error_code = None
        self.client_name = None
        self.upstream = None
        self._conn = conn
        self._keep_alive = keep_alive
        self._head = method == b"HEAD"
        self._http10 = http10
        self._state = NEW
        self._close = False
        self._chunked = False
        self._nobody = False
        self._linger = False
        self._pending: list[bytes] | None = None
        self._head_waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if conn.lost or self._disc:
            self._state = DONE
            return
        allowed = status >= 200 and status != 204 and status != 304  # body_allowed(status), inlined
        # Encode before committing: a bad status or header raises with the answer still unsent,
        # so the handler's error path can still answer 500.
        close = not self._keep_alive or ((conn.closing or conn.ctx.draining) and conn.closes_after(self))
        if not allowed or self._head or len(body) > JOIN_BODY_MAX:
            head, close = encode_h1_head(status, headers, len(body) if allowed else None, False, close)
            self._state = DONE
            self._close = close
            conn.emit(self, head)
            if allowed and body and not self._head:
                conn.emit(self, body)
        else:
            # Head and body in one buffer, joined once (an empty body adds nothing).
            answer, close = encode_h1_head(status, headers, len(body), False, close, body)
            self._state = DONE
            self._close = close
            conn.emit(self, answer)
        conn.answer_done(self)

    @property
    def takes_as_is(self) -> bool:
        # Else the head the server writes would differ: connection: close (not kept alive, or
        # maybe the connection's last answer), or no body (HEAD).
        conn = self._conn
        return (
            not self._state
            and self._keep_alive
            and not self._head
            and not conn.closing
            and not conn.ctx.draining
        )

    def respond_as_is(self, answer: bytes) -> bool:
        if not self.takes_as_is:
            return False
        conn = self._conn
        self._state = DONE
        if not conn.lost and not self._disc:
            conn.emit(self, answer)
            conn.answer_done(self)
        return True

    def start(self, status: int, headers: Headers) -> None:
        head = self._start(status, headers)
        if head is not None:
            self._conn.emit(self, head)

    def _start(self, status: int, headers: Headers) -> bytes | None:
        """The streamed answer's head (None: the client is gone), the answer now STREAMING."""
        if self._state:
            raise RuntimeError("the answer has already started")
        conn = self._conn
        if conn.lost or self._disc:
            self._state = STREAMING
            return None
        close = not self._keep_alive or conn.closes_after(self)
        nobody = self._head or not body_allowed(status)
        chunked = not nobody and not self._http10
        if not nobody and self._http10:
            close = True  # HTTP/1.0 has no chunking: closing the connection ends the body
        head, self._close = encode_h1_head(status, headers, None, chunked, close)
        self._state = STREAMING
        self._chunked = chunked
        self._nobody = nobody
        return head

    async def write(self, chunk: bytes) -> None:
        if self._state != STREAMING:
            raise RuntimeError("write() needs start() first and no end()")
        if self._disc:
            raise ClientDisconnected
        if not chunk or self._nobody:
            return
        conn = self._conn
        if not conn.is_head(self):
            await self._wait_head()
        conn.emit(self, encode_chunk(chunk) if self._chunked else chunk)
        if conn.write_paused:
            await conn.wait_writable()

    @property
    def sends_now(self) -> bool:
        return True

    def start_sending(self, status: int, headers: Headers, first: bytes) -> bool:
        head = self._start(status, headers)
        if head is None:
            return True
        if first and not self._nobody:  # head and first chunk in one write
            head = head + encode_chunk(first) if self._chunked else head + first
        return self._conn.sends(self, head)

    def send_last(self, last: bytes) -> None:
        if self._state != STREAMING:
            raise RuntimeError("send_last() needs start() first and no end()")
        self._state = DONE
        conn = self._conn
        if conn.lost or self._disc:
            return
        if self._nobody:
            last = b""
        if self._chunked:  # the last data and the last chunk in one write
            conn.emit(self, encode_chunk(last) + LAST_CHUNK if last else LAST_CHUNK)
        elif last:
            conn.emit(self, last)
        conn.answer_done(self)

    def send(self, chunk: bytes) -> bool:
        if self._state != STREAMING:
            raise RuntimeError("send() needs start() first and no end()")
        if self._disc:
            raise ClientDisconnected
        if not chunk or self._nobody:
            return True
        # One write per chunk, framing included; kept until the answers before it went out
        # (RFC 9112 §9.3.2).
        return self._conn.sends(self, encode_chunk(chunk) if self._chunked else chunk)

    async def writable(self) -> None:
        conn = self._conn
        if self._disc:
            raise ClientDisconnected
        if not conn.is_head(self):
            await self._wait_head()
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
        if conn.lost or self._disc:
            return
        if self._chunked:
            conn.emit(self, LAST_CHUNK)
        conn.answer_done(self)

    def abort(self) -> None:
        if self._state == DONE:
            return
        self._state = DONE
        self._close = True
        conn = self._conn
        if not conn.lost and not self._disc:
            conn.answer_done(self)

    @property
    def started(self) -> bool:
        return self._state != NEW

    @property
    def finished(self) -> bool:
        return self._state == DONE

    async def _wait_head(self) -> None:
        fut = self._head_waiter = self._conn.loop.create_future()
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
