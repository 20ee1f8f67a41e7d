"""One HTTP/1.1 connection to a worker (``asyncio.Protocol`` + httptools) and the answer it carries.

A connection carries one exchange at a time: it writes head and body in one go and hands the
response over as soon as its head is parsed; the body follows chunk by chunk as
``data_received`` delivers it (SSE events are never held back). A connection that failed, timed
out or was abandoned is closed, never reused (ARCHITECTURE: "a failed connection stays failed");
one whose response is complete goes back to its pool (``upstream_h1.H1Pool``) when the worker
allows keep-alive.

Failure classes (``dataplane.router.upstream.base``): a pooled connection found closed before anything
was written is ``UpstreamUnreachable`` (safe to retry elsewhere). Once the request bytes are
written, a lost connection is ``UpstreamBodyIncomplete`` and the deadline is ``UpstreamTimeout``:
the worker may have acted on the request, so those are never retried.

A slow client pauses reading from the worker once ``HIGH_WATER`` bytes are buffered
(backpressure instead of unbounded memory).

A streamed answer can also be handed on as it arrives, with no future or task per chunk
(``H1Response.relay_to`` a ``BodySink``): each read's body bytes go to the sink, joined, from
``data_received`` itself; the sink holds the worker back with ``pause()``/``resume()`` while its
client is not taking bytes, and that pause counts as the router's wait, not the worker's silence.

Deadlines (``UpstreamTimeouts``), all enforced through the pool's one timer: the exchange's own
(``timeout_s``), the response head within ``first_byte_s`` of sending, then no silence from the
worker longer than ``idle_s`` while the body is relayed (bytes the router still holds for a slow
client mean the silence is ours, not the worker's). The per-read cost is one flag test for an
exchange already complete, and a clock read for one still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Final, cast

import httptools

from dataplane.errors import RouterError
from dataplane.http.context import unmade_closing, unmade_writelines
from dataplane.http.wire import STATUS_LINES, lower_name
from dataplane.router.body import RequestBody, body_segments
from dataplane.router.headers import DROPPED, Headers
from dataplane.router.upstream.base import (
    BodySink,
    ResponseListener,
    StreamedResponse,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    UpstreamTimeouts,
    UpstreamUnreachable,
)
from dataplane.router.upstream.deadlines import Deadlines


class ConnectionHome:
    """What a connection needs from the pool it belongs to (``pool.H1Pool`` extends it), as in
    httpcore's pool/connection interface: the pool's one deadline timer, taking a connection
    back when its exchange is complete, and forgetting one that is gone.

    A base class rather than a Protocol: compiled (scripts/build_mypyc.sh), a Protocol-typed
    reference makes every attribute read and call a generic lookup by name; through a native
    base class they are field reads and vtable calls.
    """

    deadlines: Deadlines
    timeouts: UpstreamTimeouts

    def release(self, conn: H1Connection) -> bool:
        """Keep ``conn`` as idle; False when the pool will not (closed, or full): close it."""
        raise NotImplementedError

    def forget(self, conn: H1Connection) -> None:
        """``conn`` is gone: it must never be handed out again."""
        raise NotImplementedError


HIGH_WATER: Final = 1 << 20  # pause reading from the worker above this many unsent bytes
_COALESCE_BODY_BYTES: Final = 256 * 1024  # head + body in one write (writelines) below this size
_SLACK_S: Final = 0.001  # a deadline within this much is due now (uvloop's timers have ms resolution)
# Compiled, ``raw.find(...)`` is a lookup of the method by name on every call; these are not.
_find: Final = bytes.find
_split: Final = bytes.split


def _plain_names(lines: bytes) -> bool:
    """Whether no header line of ``lines`` (a head's header lines, CRLF-separated, without the
    status line) can name a header the proxy drops (``DROPPED``) other than Content-Length.

    A filter over a head llhttp has parsed, so every line is ``name:value`` with a token name
    (RFC 9112 §5): the names dropped begin with k, t, u, p, h or e, or are "connection" (the
    only one beginning with c whose fourth letter is n), in any case. False for any line it
    cannot clear (a false alarm costs the header list, never a wrong answer). Written by hand:
    httptools hands a parser's headers over only through ``on_header``, a Python call per
    header (~2k instructions each); this is one ``split`` and a byte test per line.
    """
    for line in _split(lines, b"\r\n"):
        if len(line) < 4:
            return False
        first = line[0] | 0x20  # lower-cased, for a letter
        if first == 0x63:  # c
            if line[3] | 0x20 == 0x6E:  # con-n-ection
                return False
        elif (
            first == 0x6B or first == 0x74 or first == 0x75 or first == 0x70 or first == 0x68 or first == 0x65
        ):
            return False  # k t u p h e
    return True


class UnaskedAnswer(Exception):
    """Raised from the parser's ``on_message_begin`` to stop it: a worker began an answer while
    no request of ours was waiting for one (after an answer, in the same read, or while idle)."""


class _Replay(Exception):
    """Raised from the lean parser's ``on_headers_complete`` to stop it: the read must be parsed
    again, from its start, by the parser that lists headers (``H1Connection._to_full``)."""


class HeadFields:
    """A head's header list as the router keeps it, from httptools' ``on_header``: names
    lower-cased, no hop-by-hop or framing header (``DROPPED``); and what those said."""

    __slots__ = ("delimited", "headers", "length_seen", "plain", "size")

    def __init__(self) -> None:
        self.headers: Headers = []
        self.size = 0  # bytes of names and values: the head is longer than this
        self.plain = True  # no hop-by-hop or framing header but Content-Length
        self.length_seen = False
        self.delimited = False  # body length known (Content-Length or chunked)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = lower_name(name)
        self.size += len(name) + len(value)
        if name not in DROPPED:
            self.headers.append((name, value))
        elif name == b"content-length":
            self.delimited = self.length_seen = True
        else:
            # Hop-by-hop (RFC 9110 §7.6.1) or framing: the head cannot go to a client as it came.
            self.plain = False
            if name == b"transfer-encoding":
                self.delimited = True

    def clear(self) -> None:
        self.headers = []
        self.size = 0
        self.plain = True
        self.length_seen = self.delimited = False


def read_head(head: bytes) -> HeadFields:
    """The header list of a complete head (status line to the empty line) that was parsed
    without one: the lean parser's answers that need it after all."""
    fields = HeadFields()
    httptools.HttpResponseParser(fields).feed_data(head)
    return fields


class H1Response(StreamedResponse):
    """The answer on one connection; implements ``upstream.UpstreamResponse``."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_head_min",
        "_paused",
        "_raw",
        "_sink",
        "_size",
        "_unread",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, conn: H1Connection, status: int, headers: Headers) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn
        # The read that began with this answer's head, while the answer may still go to an
        # HTTP/1.1 client as it came (``as_is``); and a lower bound of the head's length.
        self._raw = b""
        self._head_min = 0
        # Parsed without its header list (a lean exchange: ``H1Connection.send_to``), which
        # ``read_fields`` reads from ``_raw`` if the answer does not go as it came after all.
        self._unread = False
        # A list, not a deque: compiled (scripts/build_mypyc.sh), its append, pop and clear are
        # native operations where a deque's are generic method calls (once per chunk).
        self._chunks: list[bytes] = []
        self._size = 0
        self._done = False
        self._error: RouterError | None = None
        self._waiter: asyncio.Future[None] | None = None
        # Reading paused: above HIGH_WATER unsent bytes, or by the sink (its client is slow).
        self._paused = False
        self._sink: BodySink | None = None  # relay_to(): the body goes there as it arrives

    # -- fed by the connection -------------------------------------------------------------
    def _feed(self, chunk: bytes) -> None:
        # With a sink too: what one read brings goes on in one piece, after the read (_flush).
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > HIGH_WATER and not self._paused and self._sink is None:
            self._paused = True
            self._conn.pause_reading()
        if self._waiter is not None:  # a relay is waiting (never on the small-answer path)
            self._wake()

    def _finish(self, error: RouterError | None = None) -> None:
        if not self._done:
            self._done = True
            self._error = error
            if self._sink is not None:
                self._flush()
            else:
                self._wake()

    def _flush(self) -> None:
        """Hand the sink what has arrived (one piece), then the end (with the last piece) or
        the failure if it came."""
        sink = self._sink
        if sink is None:
            return
        chunk = self._take()
        if not self._done:
            if chunk:
                sink.on_body(chunk)
            return
        error = self._error
        if error is None:
            self._sink = None
            sink.on_end(chunk)
            return
        if chunk:
            sink.on_body(chunk)
            if self._sink is None:  # the sink aborted meanwhile
                return
        self._sink = None
        sink.on_error(error)

    def _take(self) -> bytes:
        chunks = self._chunks
        if not chunks:
            return b""
        chunk = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        return chunk

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

    def read_fields(self) -> Headers:
        """``headers``, read from the head now if the connection listed none (a lean exchange
        whose answer could go as it came, but goes to its client encoded anew after all)."""
        if self._unread:
            self._unread = False
            self.headers = read_head(self._raw[: self._head_min + 4]).headers
        return self.headers

    def as_is(self, extra: bytes) -> bytes | None:
        """The whole answer as the worker sent it, with the header lines ``extra`` added after
        its own, when it can go to an HTTP/1.1 client unchanged (else None: encode it anew).

        That is when it came complete in the one read that began with its head (a status line of
        HTTP/1.1 as ``wire.STATUS_LINES`` writes it, so no interim answer or stray byte came
        first), framed by Content-Length with no hop-by-hop header (the connection checked
        that: ``HeadFields``, or ``H1Connection._settle`` for a head it did not list), the
        worker keeping the connection open, and nothing after its body. llhttp refuses a head
        line without CRLF and obs-fold (RFC 9112 §5.2), so the first CRLF CRLF from a point
        inside the head is its end. Forwarding these bytes
        instead of parsing them into a header list and encoding that again (``encode_h1_head``)
        is what the floor of a proxy does (bench/README.md, "router_floor").
        """
        raw = self._raw
        if not raw or not self._done or self._error is not None:
            return None
        chunks = self._chunks
        if len(chunks) > 1:
            return None
        if self._unread:
            end = self._head_min  # all checked after its read (``H1Connection._settle``)
        else:
            line = STATUS_LINES.get(self.status)
            if line is None or not raw.startswith(line):
                return None
            end = _find(raw, b"\r\n\r\n", self._head_min)
            if end < 0 or end + 4 + (len(chunks[0]) if chunks else 0) != len(raw):
                return None
        if not extra:
            return raw
        cut = end + 2  # after the last header line's CRLF
        # %-formatted bytes: compiled, one allocation (``CPyBytes_Build``), no tuple, no buffers.
        return b"%s%s%s" % (raw[:cut], extra, raw[cut:])

    def chunks(self) -> H1Response:
        # The answer is its own async iterator (as h2c's H2Stream), not an async generator:
        # mypyc compiles no async generators (scripts/build_mypyc.sh).
        return self

    def __aiter__(self) -> H1Response:
        return self

    async def __anext__(self) -> bytes:
        buf = self._chunks
        while True:
            if buf:
                # Forward whatever has arrived, at once: join what queued up while the client
                # was being written to (fewer writes, no added delay).
                chunk = buf[0] if len(buf) == 1 else b"".join(buf)
                buf.clear()
                self._size = 0
                if self._paused:
                    self._paused = False
                    self._conn.resume_reading()
                return chunk
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            # The connection's loop, not get_running_loop(): that is a getpid() syscall per
            # call on 3.11, and a streamed answer waits here once per chunk.
            self._waiter = self._conn._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def abort(self) -> None:
        self._sink = None
        if not self._done:
            self._done = True
            self._error = UpstreamBodyIncomplete()
            conn = self._conn
            if conn._streaming is self:
                conn._streaming = None
            conn.abort()

    # -- relayed by callbacks ---------------------------------------------------------------
    def arrived(self) -> bytes:
        """The body bytes that have arrived and not been taken yet (with the head: sent with it)."""
        if self._paused and self._sink is None:  # held back above HIGH_WATER: all taken now
            self._paused = False
            self._conn.resume_reading()
        return self._take()

    def relay_to(self, sink: BodySink) -> None:
        """From now on the body goes to ``sink`` as it arrives (instead of ``chunks()``); what
        already arrived (unless taken by ``arrived()``), and the end if it did, at once. At most
        once, instead of iterating."""
        self._sink = sink
        if self._paused:  # held back above HIGH_WATER: the sink takes it all now
            self._paused = False
            self._conn.resume_reading()
        if not self._done:
            self._conn._streaming = self
        self._flush()

    def pause(self) -> None:
        """The sink's client is not taking bytes: stop reading from the worker until ``resume``
        (the time paused is the router's wait: no idle deadline runs out meanwhile)."""
        if not self._paused and not self._done:
            self._paused = True
            self._conn.pause_reading()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            conn = self._conn
            if not self._done:
                conn._heard_now()  # the idle deadline counts from now, not from before the pause
            conn.resume_reading()


class H1Connection(asyncio.Protocol):
    """One TCP connection to the worker, carrying one exchange at a time."""

    def __init__(self, pool: ConnectionHome) -> None:
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        # Bound once: compiled, ``self._loop.time()`` looks the method up by name at each call.
        self._clock: Callable[[], float] = self._loop.time
        self._transport: asyncio.Transport | None = None
        # The transport's methods of the per-request path, bound once it is made (compiled, a
        # call by name looks the method up each time, ~130 instructions).
        self._is_closing: Callable[[], bool] = unmade_closing
        self._writelines: Callable[[Iterable[bytes | memoryview]], object] = unmade_writelines
        # Two parsers, each at the start of an answer between exchanges: one that lists the
        # headers (httptools calls ``on_header`` once per header, ~2k instructions each), and
        # a lean one, for an answer that goes to an HTTP/1.1 client as it came: its head is
        # only checked (``_lean_head``), its header list read only if needed after all.
        self._fields = HeadFields()
        self._full = httptools.HttpResponseParser(
            # The connection's own methods, and the fields' on_header: httptools binds what the
            # protocol object has when the parser is made.
            SimpleNamespace(
                on_message_begin=self.on_message_begin,
                on_header=self._fields.on_header,
                on_headers_complete=self.on_headers_complete,
                on_body=self.on_body,
                on_message_complete=self.on_message_complete,
            )
        )
        self._lean_parser = httptools.HttpResponseParser(self)
        self._lean = False  # the exchange in flight is parsed by the lean parser
        self._lean_ok = True  # False once this worker sent a head that needed its list
        self._replaying = False  # the lean parser stopped (_Replay): parse the read again
        # The parser in use, bound once: compiled, a call by name looks the method up each time.
        self._feed: Callable[[bytes], None] = self._full.feed_data
        self._status_code: Callable[[], int] = self._full.get_status_code
        self._keeps_alive: Callable[[], bool] = self._full.should_keep_alive
        self.lost = False
        self.idle_since = 0.0
        # Per exchange: told of the head by a future (``send``) or a listener (``send_to``).
        self._head_waiter: asyncio.Future[H1Response] | None = None
        self._listener: ResponseListener | None = None
        self._ready: H1Response | None = None  # head parsed, listener told after the read
        self._response: H1Response | None = None
        self._streaming: H1Response | None = None  # relayed to a sink: flushed after each read
        # The read being parsed, while it is the exchange's first (its head may be forwarded as
        # it came: ``H1Response.as_is``).
        self._first_read = False
        self._read = b""
        self.deadline = 0.0  # the next one of the exchange in flight; the pool's one timer
        self._timed = False  # in the pool's set of exchanges with a deadline
        self._final = 0.0  # the whole exchange's deadline (timeout_s)
        self._heard = 0.0  # when the worker last sent a byte (or the request went out)
        self._first_byte_s = pool.timeouts.first_byte_s
        self._idle_s = pool.timeouts.idle_s
        self._keep_alive = False
        self._delimited = False  # the answer's body length known (Content-Length or chunked)
        # A request written and its final answer not complete yet: an answer may begin.
        self._in_flight = False

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = made = cast(asyncio.Transport, transport)
        self._is_closing = made.is_closing
        self._writelines = made.writelines
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self._first_read:
            self._first_read = False
            self._read = data
            self._parse(data)
            if self._lean and self._in_flight and self._response is None and not self.lost:
                # The head did not end in the exchange's first read, so the bytes it would be
                # read from are not kept: the header-listing parser takes the answer instead.
                self._to_full(data)
        else:
            self._parse(data)
        self._read = b""
        unfinished = self._response
        if unfinished is not None:
            if unfinished._unread:
                self._list_head(unfinished)
            unfinished._raw = b""  # not whole in one read: never forwarded as is (nor kept)
        if self._timed:  # still in flight after this read (a complete answer is unwatched)
            self._heard_now()
        streaming = self._streaming
        if streaming is not None:
            # The read's body bytes go on in one piece (one write to the client), then the end.
            if streaming._done:
                self._streaming = None
            streaming._flush()
        ready = self._ready
        if ready is not None:
            if ready._unread:
                self._settle(ready)
            # Told after the whole read was parsed, so a small answer arrives complete (the
            # listener answers it in one write) and the connection is already back in the pool.
            listener = self._listener
            self._ready = self._listener = None
            if listener is not None:
                listener.on_response(ready)

    def _parse(self, data: bytes) -> None:
        try:
            self._feed(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBodyIncomplete())
        except httptools.HttpParserError:
            if self._replaying:
                self._replaying = False
                self._to_full(data)
            elif self._in_flight:
                self._fail(UpstreamBodyIncomplete())
            else:
                self._drop()

    def _to_full(self, data: bytes) -> None:
        """The exchange's first read (``data``, which begins its answer) again, from its start,
        through the header-listing parser: the lean one stopped inside the answer, so it is
        replaced (httptools has no reset)."""
        self._lean_parser = httptools.HttpResponseParser(self)
        self._use(False)
        self._read = data
        self._parse(data)

    def _use(self, lean: bool) -> None:
        parser = self._lean_parser if lean else self._full
        self._lean = lean
        self._feed = parser.feed_data
        self._status_code = parser.get_status_code
        self._keeps_alive = parser.should_keep_alive

    def eof_received(self) -> bool:
        self._on_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_closed()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        if not self._in_flight:
            # Bytes no request asked for: answered as the next request's, they would shift
            # every later answer to the wrong client (response desync). The answer before them
            # stands; the connection is never used again (``data_received``).
            raise UnaskedAnswer()

    # No ``on_header``: the lean parser's protocol is the connection itself, and httptools
    # calls back only what the protocol has. The full parser's is ``HeadFields.on_header``.

    def on_headers_complete(self) -> None:
        status = self._status_code()
        if 100 <= status < 200:  # interim answer (RFC 9110 §15.2): the final one follows
            if self._lean:
                # The final head may follow in this read, not at its start: not lean.
                self._replaying = True
                raise _Replay()
            self._fields.clear()
            self._read = b""  # the final head does not begin this read
            return
        keep_alive = self._keep_alive = self._keeps_alive()
        if self._lean:
            response = self._lean_head(status, keep_alive)
        else:
            fields = self._fields
            response = H1Response(self, status, fields.headers)
            self._delimited = fields.delimited
            if self._read and fields.plain and fields.length_seen and keep_alive:
                response._raw = self._read
                # "HTTP/1.1 NNN" plus every name and value: the head's last CRLF CRLF lies beyond.
                response._head_min = 12 + fields.size
            fields.clear()
        self._response = response
        if self._listener is not None:
            self._ready = response
            return
        waiter = self._head_waiter
        self._head_waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _lean_head(self, status: int, keep_alive: bool) -> H1Response:
        """The answer's head, parsed by the lean parser from the exchange's first read (which
        it begins), its headers not listed. Whether it may go to a client as it came is
        settled once the read is parsed (``_settle``), when the body's length tells where the
        head ends; a head that cannot has its list read now (``_list_head``)."""
        raw = self._read
        response = H1Response(self, status, [])
        response._raw = raw
        response._unread = True
        line = STATUS_LINES.get(status)
        # Kept alive, with a body, and (``_settle``) without Transfer-Encoding: framed by
        # Content-Length, as ``HeadFields`` requires of a head that goes as it came.
        if not keep_alive or status == 204 or status == 304 or line is None or not raw.startswith(line):
            self._list_head(response)
        else:
            response._head_min = len(line)  # where its header lines begin, for _settle
        return response

    def _settle(self, response: H1Response) -> None:
        """After the read that began it: a lean answer goes as it came if that read holds
        exactly its head and its whole body, and no header line of the head can name a header
        the proxy drops (``_plain_names``); else its header list is read now."""
        raw = response._raw
        chunks = response._chunks
        if response._done and response._error is None and len(chunks) <= 1:
            # Where the head ends if nothing came after the body: checked, and the header
            # lines before it hold no empty line (else the head ended earlier, bytes followed).
            end = len(raw) - (len(chunks[0]) if chunks else 0) - 4
            lines = response._head_min
            if (
                lines <= end
                # raw[end : end + 4] == b"\r\n\r\n", without the slice
                and raw[end] == 13
                and raw[end + 1] == 10
                and raw[end + 2] == 13
                and raw[end + 3] == 10
                and _plain_names(raw[lines:end])
            ):
                response._head_min = end
                return
        self._list_head(response)

    def _list_head(self, response: H1Response) -> None:
        """A lean answer that does not go as it came: its header list, read from its head."""
        raw = response._raw
        fields = read_head(raw[: _find(raw, b"\r\n\r\n") + 4])
        response.headers = fields.headers
        response._unread = False
        response._raw = b""  # never forwarded as is
        if response is self._response:  # still in flight: how its body ends
            self._delimited = fields.delimited
        if not fields.plain:
            self._lean_ok = False  # this worker's heads need their list: list them as they come

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        response = self._response
        if response is None:  # end of an interim (1xx) message
            return
        self._response = None
        self._delimited = self._in_flight = False
        if self._timed:
            self._timed = False
            self._pool.deadlines.unwatch(self)
        if not response._done:  # response._finish(), inlined: the per-request path
            response._done = True
            if response._waiter is not None:
                response._wake()
            # A sink is told by data_received, after the read's body bytes (``_streaming``).
        if self._keep_alive and not self.lost:
            self.idle_since = self._clock()
            if self._pool.release(self):
                return
        self.close()

    # -- exchange --------------------------------------------------------------------------
    def send(self, head: bytes, body: RequestBody, now: float, deadline: float) -> asyncio.Future[H1Response]:
        """Write the request; the future resolves with the response head.

        A plain function returning the future (not a coroutine): one frame less per request.
        """
        transport = self._writable()
        if self._lean:
            self._use(False)
        waiter: asyncio.Future[H1Response] = self._loop.create_future()
        self._head_waiter = waiter
        self._write(transport, head, body, now, deadline)
        return waiter

    def send_to(
        self, head: bytes, body: RequestBody, now: float, deadline: float, listener: ResponseListener
    ) -> None:
        """Write the request; ``listener`` is told of the head or the failure (no future, no task)."""
        transport = self._transport  # self._writable(), inlined: the per-request path
        if self.lost or transport is None or self._is_closing():
            self.close()
            raise UpstreamUnreachable()
        self._listener = listener
        lean = self._lean_ok and listener.takes_raw()
        if lean != self._lean:
            self._use(lean)
        self._write(transport, head, body, now, deadline)

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

    def _write(
        self, transport: asyncio.Transport, head: bytes, body: RequestBody, now: float, deadline: float
    ) -> None:
        self._final = deadline
        self._heard = now
        self._first_read = self._in_flight = True
        first = now + self._first_byte_s
        self.deadline = first if first < deadline else deadline
        self._timed = True
        self._pool.deadlines.watch(self, self.deadline, self._loop)
        if not body:
            transport.write(head)
        elif len(body) <= _COALESCE_BODY_BYTES:
            # One segment: head and body written separately cost a measured 1-3 ms at p90 on
            # loopback (the second small segment waits behind the first's ACK). ``writelines``:
            # uvloop sends the pieces with one writev, without joining them into a new buffer
            # first (a large allocation and a copy of the body per request; asyncio's own
            # transports join them, as this did).
            if isinstance(body, bytes):
                self._writelines((head, body))
            else:
                self._writelines((head, *body.segments))
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
        """A deadline of the exchange passed (called by the pool's timer): fail it, unless only
        the idle deadline was due and the worker was heard from since (then watch again)."""
        response = self._response
        if response is not None:
            now = self._clock()
            # Bytes the relay has not taken yet, or reading paused for the client: the wait is
            # the router's client's, not the worker's.
            quiet_since = now if response._chunks or response._paused else self._heard
            due = min(quiet_since + self._idle_s, self._final)
            if due > now + _SLACK_S:
                self.deadline = due
                self._timed = True
                self._pool.deadlines.watch(self, self.deadline, self._loop)
                return
        self._fail(UpstreamTimeout())

    def _heard_now(self) -> None:
        """The worker sent bytes of the exchange in flight; once its head is in, the next
        deadline is the idle one."""
        now = self._heard = self._clock()
        if self._response is not None:
            due = now + self._idle_s
            if due < self.deadline:
                self.deadline = due
                self._pool.deadlines.watch(self, self.deadline, self._loop)

    def stalled_since(self, since: float) -> bool:
        """Nothing from the worker since ``since`` (or no answer head at all: a request written
        after the first failed check waits on the same hung worker), and nothing held back for
        our client."""
        response = self._response
        if response is None:
            return True
        return self._heard < since and not response._chunks and not response._paused

    def on_stalled(self) -> None:
        """The worker stopped answering (its health checks failed): time the exchange out now."""
        self._cancel_timer()
        self._fail(UpstreamTimeout())

    def _fail(self, error: RouterError) -> None:
        waiter, self._head_waiter = self._head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        listener, self._listener = self._listener, None
        self._ready = self._streaming = None
        response, self._response = self._response, None
        if response is not None:
            response._finish(error)
        self.abort()
        if listener is not None:
            listener.on_failure(error)

    def _drop(self) -> None:
        """Parsing failed on bytes that came after the answer (or with no request out): that
        answer stands, the connection leaves the pool and closes."""
        self._pool.forget(self)
        self.abort()

    def _on_closed(self) -> None:
        if self.lost and self._head_waiter is None and self._listener is None and self._response is None:
            return
        self.lost = True
        self._pool.forget(self)
        if self._response is not None and not self._delimited:
            # A body delimited by the end of the connection (RFC 9112 §6.3 rule 8) is complete.
            response, self._response = self._response, None
            self._streaming = None
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
            self._pool.deadlines.unwatch(self)
