"""One h2c upstream request: the stream's state as its connection fills it and the router reads it.

An ``H2Stream`` is the ``UpstreamResponse`` of the h2c upstream: ``status`` and ``headers`` once
the worker answered, ``chunks()`` for the body as it arrives, ``abort()`` when the router's client
went away. The connection (``upstream_h2.H2Connection``) calls the ``*_received``/``ended``/
``fail`` methods from its protocol callbacks; nothing here does I/O itself, the connection is only
asked to return flow-control credit (``consumed``) and to reset the stream (``cancel``).

Deadlines (``UpstreamTimeouts``): the response head within ``first_byte_s`` of sending, then no
silence from the worker longer than ``idle_s`` (bytes still buffered for the router's slow client
do not count), never past the exchange's own deadline. They are enforced by the connection's
``Deadlines`` (one timer for all its streams, as the HTTP/1.1 upstream does): a timer armed and
cancelled per stream, twice (head, then idle), cost more than the rest of the stream's bookkeeping.

Two ways to learn of the head: ``await response_started()`` (the request's task), or a
``ResponseListener`` (``listen``, from ``H2Pool.start``: the callback-driven exchange of
``path.exchange``, no task). A listener is told once, after the connection decoded everything
of the read that carried the head (so ``buffered_body()`` sees a body that came with it), or at
once when the stream fails outside a read (timeout, hung worker, connection lost). A stream the
worker refused unprocessed (REFUSED_STREAM, GOAWAY: RFC 9113 §8.7) is not the listener's
failure: the pool tries once more (``Retrier``), as ``H2Pool.request`` does.

Two ways to take the body: ``chunks()`` (a task iterates), or ``relay_to`` a ``BodySink`` (the
callback relay, ``path.relay.StreamRelay``): each read's bytes handed on after the read, the
worker held back by withholding credit while the sink is paused (``StreamedResponse``).
"""

from __future__ import annotations

import asyncio
from typing import cast

from dataplane.errors import RouterError, UpstreamBodyIncomplete, UpstreamTimeout
from dataplane.http.h2_frames import CANCEL
from dataplane.http.wire import BoxedHeaders
from dataplane.router.body import RequestBody
from dataplane.router.headers import DROPPED, Headers
from dataplane.router.upstream.base import BodySink, ResponseListener, StreamedResponse, UpstreamTimeouts
from dataplane.router.upstream.deadlines import Deadlines
from dataplane.router.upstream.h2c.codec import CodecListener


def parse_head(headers: Headers) -> tuple[int, Headers]:
    """``:status`` and the headers to forward: no pseudo-headers, no hop-by-hop or framing ones."""
    status = 0
    out: BoxedHeaders = []
    dropped = DROPPED
    for item in cast(BoxedHeaders, headers):
        name = item[0]
        if name[:1] == b":":
            if name == b":status":
                status = int(item[1])
        elif name not in dropped:
            out.append(item)
    return status, cast(Headers, out)


class StreamOwner(CodecListener, asyncio.Protocol):
    """What a stream needs from its connection (``h2c.connection.H2Connection`` extends it; the
    codec's listener too, for the same reason).

    A base class rather than a Protocol: compiled (scripts/build_mypyc.sh), a Protocol-typed
    reference makes every attribute read and call a generic lookup by name; through a native
    base class they are field reads and vtable calls.
    """

    deadlines: Deadlines
    # Receive credit goes back a quarter window at a time (``CodecOutput.consumed``): a stream
    # holds back smaller amounts itself rather than calling ``consumed`` per chunk.
    credit_batch: int

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """The router's client took ``nbytes`` of the stream: return that credit."""
        raise NotImplementedError

    def cancel(self, stream: H2Stream, code: int = CANCEL) -> None:
        """RST_STREAM(``code``) for a stream the router no longer wants."""
        raise NotImplementedError

    def notify(self, stream: H2Stream) -> None:
        """A listened stream has news to deliver."""
        raise NotImplementedError

    def clock(self) -> float:
        """The loop's time, read at most once per read from the worker (every frame of one
        read arrived at the same moment)."""
        raise NotImplementedError


class Retrier:
    """Tries a refused callback-driven stream's request once more (``h2c.pool.H2Pool`` extends
    it; a base class for the same reason as ``StreamOwner``)."""

    def retry(self, refused: H2Stream, listener: ResponseListener) -> None:
        raise NotImplementedError


class H2Stream(StreamedResponse):
    """A request in flight on an h2c connection, and its response as it streams in."""

    __slots__ = (
        "_buf",
        "_conn",
        "_eof",
        "_error",
        "_final",
        "_heard",
        "_idle_s",
        "_listener",
        "_loop",
        "_paused",
        "_retrier",
        "_sink",
        "_successor",
        "_timed",
        "_unacked",
        "_waiter",
        "deadline",
        "headers",
        "pending",
        "pending_off",
        "refused",
        "request",
        "started",
        "status",
        "stream_id",
    )

    def __init__(
        self,
        conn: StreamOwner,
        stream_id: int,
        body: RequestBody,
        deadline: float,
        now: float,
        loop: asyncio.AbstractEventLoop,
        timeouts: UpstreamTimeouts,
    ) -> None:
        """``now``: the loop's time as the request is sent (the caller read it for ``deadline``)."""
        self._conn = conn
        self.stream_id = stream_id
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.started = False  # response headers arrived
        self.refused = False  # the live worker declined it unprocessed (REFUSED_STREAM, GOAWAY)
        self.pending = body  # the request body; bytes from pending_off on are not sent yet
        self.pending_off = 0
        # A list, not a deque: compiled (scripts/build_mypyc.sh), its append and clear are native
        # operations where a deque's are calls by name, and creating it is one too.
        self._buf: list[bytes] = []
        self._unacked = 0  # flow-controlled bytes received, credit not yet returned
        self._eof = False
        self._error: RouterError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._listener: ResponseListener | None = None  # told of the head instead of a waiter
        self._sink: BodySink | None = None  # relay_to(): the body goes there as it arrives
        self._paused = False  # the sink's client is not taking bytes: no credit, bytes kept here
        self._retrier: Retrier | None = None
        self._successor: asyncio.Task[None] | None = None  # the retry of a refused listened stream
        # (method, path, headers) as sent, kept by a listened stream for its retry.
        self.request: tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None = None
        self._loop = loop
        self._idle_s = timeouts.idle_s
        self._final = deadline
        self._heard = now
        first = now + timeouts.first_byte_s
        self.deadline = first if first < deadline else deadline  # ``deadlines.Timed``
        self._timed = True  # watched by the connection's ``Deadlines``
        conn.deadlines.watch(self, self.deadline, loop)

    # -- the callback-driven exchange -------------------------------------------------------------

    def listen(
        self,
        listener: ResponseListener,
        retrier: Retrier,
        request: tuple[bytes, bytes, list[tuple[bytes, bytes]]],
    ) -> None:
        """Tell ``listener`` of the head or the failure instead of waking ``response_started``."""
        self._listener = listener
        self._retrier = retrier
        self.request = request

    def abandon(self) -> None:
        """The listener's client left before the head: nobody is told anything any more, the
        stream (or the retry that replaced it) is reset (``path.exchange.Abandonable``)."""
        self._listener = None
        successor, self._successor = self._successor, None
        if successor is not None:
            successor.cancel()
        self.abort()

    def deliver(self) -> None:
        """Tell the listener, if the head or a failure is there to tell, or hand the sink what
        came (``H2Connection.notify``)."""
        listener = self._listener
        if listener is None:
            if self._sink is not None:
                self._to_sink()
            return
        if self.started:
            self._listener = None
            listener.on_response(self)
            return
        error = self._error
        if error is None:
            return  # nothing decisive yet (an informational head, DATA before HEADERS)
        self._listener = None
        retrier = self._retrier
        if self.refused and retrier is not None:
            self._retrier = None
            retrier.retry(self, listener)
            return
        listener.on_failure(error)

    def retried_by(self, task: asyncio.Task[None]) -> None:
        """``task`` retries this refused stream's request: ``abandon`` cancels it."""
        self._successor = task

    @property
    def final_deadline(self) -> float:
        return self._final

    # -- UpstreamResponse -----------------------------------------------------------------------

    async def response_started(self) -> None:
        """Wait for the response headers; raises the stream's error if it failed first."""
        while not self.started:
            if self._error is not None:
                raise self._error
            # ``_wait``, inlined: one coroutine frame less per request.
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def buffered_body(self) -> bytes | None:
        """The whole body if it has fully arrived (the one-write fast path), else ``None``."""
        if not self._eof or self._error is not None:
            return None
        data = self._take()
        self._flush_credit()
        return data

    def chunks(self) -> H2Stream:
        return self

    def __aiter__(self) -> H2Stream:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._buf:
                # Coalesce what arrived meanwhile: fewer writes to the client, same bytes.
                return self.arrived()
            if self._error is not None:
                raise self._error
            if self._eof:
                raise StopAsyncIteration
            await self._wait()

    def abort(self) -> None:
        """The router's client went away: RST_STREAM(CANCEL) unless the stream already ended."""
        self._sink = None
        if self._eof or self._error is not None:
            self._drop_buffer()
            return
        self._error = UpstreamBodyIncomplete("request cancelled")
        self._unwatch()
        self._conn.cancel(self)
        self._drop_buffer()
        self._wake()

    # -- relayed by callbacks (``StreamedResponse``) --------------------------------------------
    def arrived(self) -> bytes:
        if not self._buf:
            return b""
        data = self._take()
        self._flush_credit()
        return data

    def relay_to(self, sink: BodySink) -> None:
        """From now on the body goes to ``sink``, from the connection's callbacks after each read
        (``deliver``): no future, task or iterator per chunk (``path.relay.StreamRelay``)."""
        self._sink = sink
        self._to_sink()

    def pause(self) -> None:
        """The sink's client is not taking bytes: what the worker sends stays here and its credit
        is withheld (RFC 9113 §5.2, §6.9), so the worker stops once the stream's window is
        spent; this stream only, the connection's other streams flow on. Memory: at most the
        window. The idle deadline does not run meanwhile (the wait is the router's)."""
        self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            if not self._eof and self._error is None:
                self._heard = self._conn.clock()  # the idle deadline counts from now
            self._to_sink()

    def _to_sink(self) -> None:
        """Hand the sink what has arrived (one piece, its credit returned) unless paused, then
        the end (with the last piece) or the failure if it came."""
        sink = self._sink
        if sink is None:
            return
        done = self._eof or self._error is not None
        if self._paused and not done:
            return  # held here, credit withheld: the worker stops at the window's end
        chunk = self._take()
        if not done:
            if chunk:
                self._flush_credit()
                sink.on_body(chunk)
            return
        self._sink = None
        error = self._error
        if error is None:
            sink.on_end(chunk)
            return
        if chunk:
            sink.on_body(chunk)
        sink.on_error(error)

    def _take(self) -> bytes:
        """The body bytes buffered, in one piece, out of the buffer (their credit not returned)."""
        buf = self._buf
        if not buf:
            return b""
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        buf.clear()
        return data

    # -- fed by the connection ------------------------------------------------------------------

    def head_received(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The response head (from ``parse_head``); ``headers`` may be shared: never mutated."""
        if 100 <= status < 200:  # informational (RFC 9110 §15.2): the real answer follows
            return
        self.status = status
        self.headers = headers
        self.started = True
        if not self._eof and self._error is None:
            # The idle deadline from now on (the first-byte one is met).
            self._heard = now = self._conn.clock()
            due = now + self._idle_s
            self.deadline = due if due < self._final else self._final
            if self._timed:
                # Still in the watched set: only an earlier deadline than the timer's re-arms it.
                self._conn.deadlines.watch(self, self.deadline, self._loop)
        self._wake()

    def data_received(self, data: bytes, flow_controlled: int, end_stream: bool) -> None:
        """Body bytes (``flow_controlled``: the frame's length, padding included); the last
        ones when ``end_stream`` (``ended`` follows, so no deadline needs the time they came)."""
        if not end_stream:
            self._heard = self._conn.clock()
        self._unacked += flow_controlled
        if data:
            self._buf.append(data)
            self._wake()
        elif flow_controlled:
            self._flush_credit()

    def ended(self) -> None:
        self._eof = True
        self._unwatch()
        if not self.started:
            self._error = UpstreamBodyIncomplete()
        self._wake()

    def fail(self, error: RouterError) -> None:
        if self._eof or self._error is not None:
            return
        self._error = error
        self._unwatch()
        self._wake()

    # -- internals ------------------------------------------------------------------------------

    def stalled_since(self, since: float) -> bool:
        """Nothing from the worker since ``since`` (or no answer head at all: a stream opened
        after the first failed check waits on the same hung worker), and nothing held back for
        our client."""
        quiet = self._heard < since or not self.started
        return quiet and not self._buf and not self._paused and not self._eof and self._error is None

    def on_timeout(self) -> None:
        """``deadline`` passed (called by the connection's ``Deadlines``, which no longer watches
        the stream): fail it, unless only the idle deadline was due and the worker was heard
        from since, or bytes are still held for the router's client (then watch again)."""
        self._timed = False
        if self._eof or self._error is not None:
            return
        if self.started:
            now = self._loop.time()
            # Bytes the relay has not taken yet, or a sink holding the worker back: the wait is
            # the router's client's, not the worker's.
            held = self._buf or self._paused
            due = min((now if held else self._heard) + self._idle_s, self._final)
            if due > now + 0.001:
                self.deadline = due
                self._timed = True
                self._conn.deadlines.watch(self, self.deadline, self._loop)
                return
        self.time_out()

    def time_out(self) -> None:
        """Fail with ``UpstreamTimeout`` and reset the stream (a deadline passed, or the worker
        stopped answering its health checks)."""
        if self._eof or self._error is not None:
            return
        self._unwatch()
        self._error = UpstreamTimeout()
        self._conn.cancel(self)
        self._drop_buffer()
        self._wake()

    def _unwatch(self) -> None:
        if self._timed:
            self._timed = False
            self._conn.deadlines.unwatch(self)

    def _drop_buffer(self) -> None:
        self._buf.clear()
        self._flush_credit()

    def _flush_credit(self) -> None:
        """The bytes buffered so far are taken: their credit goes back once it makes a batch
        (RFC 9113 §6.9), as the codec would batch it anyway. What a stream never returns goes
        with it when it closes."""
        unacked = self._unacked
        if unacked >= self._conn.credit_batch:
            self._unacked = 0
            self._conn.consumed(self.stream_id, unacked)

    async def _wait(self) -> None:
        # The stream's loop, not get_running_loop() (a getpid() syscall per call on 3.11): a
        # streamed answer waits here once per chunk.
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
        elif self._listener is not None or self._sink is not None:
            self._conn.notify(self)
