"""HTTP/1.1 connections: an ``asyncio.Protocol`` fed to httptools, answers in request order.

Pipelining (RFC 9112 §9.3.2): requests are dispatched as soon as they are parsed, but only the
answer at the head of the queue writes to the socket; later answers buffer until they reach
the head (a streaming one waits in ``write``). Reading pauses once ``h1_max_pipelined``
answers are outstanding. A connection whose first bytes are the h2 preface is handed to
``Http2Connection`` (prior knowledge, RFC 9113 §3.3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Final, cast

import httptools

from dataplane.errors import ErrorAnswer
from dataplane.http.context import ServerContext, close_idle, set_nodelay, still_draining, unmade_write
from dataplane.http.http1_responder import DONE, AnswerQueue, H1Responder
from dataplane.http.http2 import Http2Connection
from dataplane.http.request import Request, dispatch
from dataplane.http.wire import (
    BUFFER_FULL,
    CONTINUE_100,
    HEADERS_TOO_LARGE,
    MALFORMED,
    NO_VERSION,
    TIMED_OUT,
    TOO_LARGE,
    UPGRADE_WITH_BODY,
    VERSION_NOT_SUPPORTED,
    Headers,
    classify_preface,
    digits_value,
    lower_name,
    plain_lines,
)

# Compiled, ``raw.find(...)`` is a lookup of the method by name on every call; these are not.
_find: Final = bytes.find
_partition: Final = bytes.partition
_PARTITION_MAX_BYTES: Final = 512
_POST: Final = b"POST"


class _Stop(Exception):
    """Raised inside a parser callback to stop parsing; the reason is in ``_error``."""


class _Replay(Exception):
    """Raised inside a callback of the lean parser to stop it: the request it is reading must be
    read again, from its first byte in this read (``_replay_from``), by the parser that lists
    headers (``Http1Connection._to_full``)."""


def _announces_body(headers: Headers) -> bool:
    return any(
        (n == b"content-length" and digits_value(v) > 0) or n == b"transfer-encoding" for n, v in headers
    )


class Http1Connection(AnswerQueue):
    """One HTTP/1.1 client connection (and the protocol detector of every new connection)."""

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.loop = ctx.loop
        # The loop's clock, bound once: compiled, ``self.loop.time()`` looks the method up by
        # name at every call.
        self._clock: Callable[[], float] = ctx.loop.time
        self.limits = ctx.limits
        self._max_body = ctx.limits.max_body_bytes
        self._max_header = ctx.limits.max_header_bytes
        self._max_held = ctx.limits.max_buffered_body_bytes
        # A body is counted in ctx.body_held once it passes this: a smaller one costs no more
        # than the request head the server holds uncounted anyway (max_header_bytes), and the
        # per-request path then pays a single comparison for it.
        self._uncounted_body = min(self._max_body, ctx.limits.max_header_bytes)
        self.transport = None
        self._write: Callable[[bytes], object] = unmade_write  # transport.write, once made
        # Two parsers. The lean one (the connection itself is its protocol: no ``on_header``, and
        # httptools calls back only what the protocol has) reads requests as long as each one
        # begins a read and its head lies whole in it: the head is then read from those bytes
        # (``_lean_head``), no Python call per header (~2k instructions each). The one that lists
        # headers takes over for good at the first other request (``_to_full``: a head split
        # across reads, pipelining, a field that needs the list): where a request begins is
        # known only while every earlier one was read lean (framed by Content-Length).
        self._parser = httptools.HttpRequestParser(self)
        self._lean = True  # the parser is the lean one
        self._replay_from = -1  # where the request to read again begins in the read (_Replay)
        self._read = b""  # the read being parsed by the lean parser
        self._next = 0  # where the next request begins in that read (lean)
        self._msg_start = 0  # where the request being read began in it (lean)
        self._length = 0  # the lean request's Content-Length (0: none)
        self._block = b""  # the lean request's field lines, each led by CRLF
        self._lines: bytes | None = None  # those an HTTP/1.1 hop may get as they came
        self._lean_method = b""  # the lean request's method and version, from its request line
        self._http10 = False
        # Bound once: compiled, a call by name looks the method up on every call.
        parser = self._parser
        self._feed: Callable[[bytes], None] = parser.feed_data
        self._upgrades: Callable[[], bool] = parser.should_upgrade
        self._keeps_alive: Callable[[], bool] = parser.should_keep_alive
        self._method: Callable[[], bytes] = parser.get_method
        self._version: Callable[[], str] = parser.get_http_version
        self._detecting = True
        self._preface = b""
        # The request being parsed.
        self._in_message = False
        self._headers_done = False
        self._partial_head = 0
        self._raw_body = 0
        # Chunk framing may double a body of small chunks; beyond that it is abuse (or trailers).
        self._max_raw_body = 2 * self._max_body + self._max_header + 65536
        self._url = b""
        self._headers: Headers = []
        self._header_bytes = 0
        # The body read so far: its one part (the usual case: no list), or its parts.
        self._body: bytes | list[bytes] | None = None
        self._body_bytes = 0
        self._counted = 0  # bytes of the body being read counted in ctx.body_held
        # Counted body bytes of requests read and not yet answered (given back when no answer
        # is outstanding).
        self._held = 0
        self._expect_continue = False
        self._connection_header = False
        self._arm_read = False  # a request began in the read being parsed (``_begin``)
        self._error: ErrorAnswer | None = None
        # Answers, oldest first; only the head writes to the socket. The head in a slot of its
        # own and the pipelined ones behind it in a list: a list alone would go 1 -> 0 -> 1
        # long at every request, and CPython frees its array when it empties and allocates it
        # again at the next append (~430 instructions a request). A list, not a deque: at most
        # h1_max_pipelined long, and compiled (scripts/build_mypyc.sh) its indexing, append and
        # pop are native operations where a deque's are generic method calls.
        self._head: H1Responder | None = None  # None: no answer outstanding (and none behind)
        self._behind: list[H1Responder] = []
        self.closing = False  # no further request is dispatched
        self._discarding = False  # the parser is done; input is dropped
        self._lingering = False
        self._reading_paused = False
        self._deadline = 0.0
        self._stuck_size = 0
        self.lost = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have the same API.
        self.transport = made = cast(asyncio.Transport, transport)
        # Bound once: compiled, ``transport.write(...)`` looks the method up by name each time.
        self._write = made.write
        set_nodelay(transport)
        self.ctx.connections.add(self)
        self._deadline = self._clock() + self.limits.idle_timeout_s

    def data_received(self, data: bytes) -> None:
        if self._detecting:
            detected = self._detect(data)
            if detected is None:
                return
            data = detected
        if self._discarding:
            return
        if self._lean:
            self._read = data
            # Where the next request begins: here, or after what the lean request being read
            # still has of its body (its head was whole in an earlier read: Content-Length).
            self._next = self._length - self._body_bytes if self._in_message else 0
            parsed = self._parse(data)
            self._read = b""
            if parsed and self._lean:
                # A head that goes on in the next read (or a request line not even begun: no
                # ``on_url`` yet): its bytes are not kept, so the parser that lists headers reads
                # it again from its start.
                if self._in_message:
                    if not self._headers_done:
                        parsed = self._to_full(data, self._msg_start)
                elif self._next < len(data):
                    parsed = self._to_full(data, self._next)
        else:
            parsed = self._parse(data)
        if not parsed:
            return
        if self._arm_read:
            self._arm_read = False
            if self._in_message:  # begun in this read, not finished: its read deadline
                self._deadline = self._clock() + self.limits.read_timeout_s
        if self._in_message:
            # httptools accumulates a header (or trailer) field before calling back: bound the
            # raw bytes of an unfinished head, and of a body (whose trailers count too).
            if not self._headers_done:
                self._partial_head += len(data)
                if self._partial_head > self._max_header:
                    self._fail(HEADERS_TOO_LARGE)
            else:
                self._raw_body += len(data)
                if self._raw_body > self._max_raw_body:
                    self._fail(TOO_LARGE)

    def _parse(self, data: bytes) -> bool:
        """Feed ``data`` to the parser in use; False if the connection failed (answered)."""
        try:
            self._feed(data)
        except httptools.HttpParserUpgrade as exc:
            # RFC 9110 §7.8: a server may ignore Upgrade; keep parsing what follows as HTTP/1.1.
            return self._resume_after_upgrade(data, int(exc.args[0]))
        except httptools.HttpParserError:
            start = self._replay_from
            if start >= 0:
                self._replay_from = -1
                return self._to_full(data, start)
            error, self._error = self._error, None
            self._fail(error or MALFORMED)
            return False
        return True

    def _to_full(self, data: bytes, start: int) -> bool:
        """What begins at ``start`` in ``data`` (the lean parser's read: a request, or bytes
        before one) read again by the parser that lists headers, which reads every later request
        of the connection."""
        # The connection's own callbacks, and an ``on_header``: httptools binds what the protocol
        # object has when the parser is made.
        full = self._parser = httptools.HttpRequestParser(
            SimpleNamespace(
                on_url=self.on_url,
                on_header=self._on_header,
                on_headers_complete=self.on_headers_complete,
                on_body=self.on_body,
                on_message_complete=self.on_message_complete,
            )
        )
        self._lean = False
        self._feed = full.feed_data
        self._upgrades = full.should_upgrade
        self._keeps_alive = full.should_keep_alive
        self._method = full.get_method
        self._version = full.get_http_version
        self._in_message = False  # it begins again
        return self._parse(data[start:] if start else data)

    def eof_received(self) -> bool | None:
        # A client that closes its side is treated as gone (as nginx and uvicorn do): the
        # transport closes and in-flight handlers see ``disconnected``.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.ctx.remove(self)
        self._drop_body()
        self.ctx.body_held -= self._held
        self._held = 0
        self._drop_queue()
        self._wake_writers()

    # -- httptools callbacks ------------------------------------------------------------------

    # No ``on_message_begin``: httptools calls back only what the protocol defines, and each
    # callback costs ~1k instructions of call overhead per request. A request's first callback is
    # ``on_url`` (llhttp requires a request-target), so a request begins there.

    def on_url(self, url: bytes) -> None:
        if self._in_message:
            self._url += url  # the request-target continues in a later read
            self._header_bytes += len(url)
        else:
            self._begin(url)
        if self._header_bytes > self._max_header:
            self._error = HEADERS_TOO_LARGE
            raise _Stop

    def _begin(self, url: bytes) -> None:
        """A request begins: its state from scratch, its request-target's first bytes."""
        self._in_message = True
        self._headers_done = False
        self._url = url
        if not self._lean:
            self._headers = []
        self._header_bytes = len(url)
        self._body = None
        self._body_bytes = 0
        self._raw_body = 0
        self._expect_continue = False
        self._connection_header = False
        self._msg_start = self._next
        self._length = 0
        self._lines = None
        # The read deadline is armed once this read is parsed, if the request is still
        # unfinished then (``data_received``): one read carrying a whole request needs no clock.
        self._arm_read = True

    # Not named ``on_header``: the lean parser's protocol is the connection itself (the full
    # parser's names this one).
    def _on_header(self, name: bytes, value: bytes) -> None:
        if self._headers_done:
            return  # a chunked trailer: ignored, never merged into the headers (RFC 9110 §6.5.1)
        name = lower_name(name)
        size = len(name)
        self._header_bytes += size + len(value)
        # Each name compared only when its length matches: most headers are none of the three,
        # and a length test is cheaper than a call to compare bytes (two saved per header).
        if size == 14 and name == b"content-length":
            # llhttp has validated the digits; refuse before a byte of the body is read.
            if digits_value(value) > self._max_body:
                self._error = TOO_LARGE
                raise _Stop
        elif size == 10 and name == b"connection":
            self._connection_header = True
        elif size == 6 and name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._lean:
            self._lean_head()
        elif self._header_bytes > self._max_header:
            self._error = HEADERS_TOO_LARGE
            raise _Stop
        elif self._upgrades() and _announces_body(self._headers):
            # httptools skips the body of a request it takes for an Upgrade and would parse that
            # body as the next request: a desync (RFC 9112 §11.2). We never switch protocols
            # (RFC 9110 §7.8 lets a server ignore Upgrade) and cannot read such a body: refuse.
            self._error = UPGRADE_WITH_BODY
            raise _Stop
        self._headers_done = True
        self._partial_head = 0
        if self._expect_continue and self._head is None and self.transport is not None:
            # RFC 9110 §10.1.1; when answers are outstanding it is sent once they are done.
            self._expect_continue = False
            self.transport.write(CONTINUE_100)

    def _lean_head(self) -> None:
        """The lean parser read a head: its field lines are taken from the read (``plain_lines``)
        when the request began the read; else the parser that lists headers reads the request
        again (``_Replay``)."""
        start = self._msg_start
        raw = self._read
        # A request that begins the read with "POST " is a POST (llhttp read its method there):
        # a native prefix test, where asking the parser makes a new bytes object (~300
        # instructions compiled).
        method = _POST if start == 0 and raw.startswith(b"POST ") else self._method()
        if start == 0 and method != b"CONNECT":  # (CONNECT: ``on_headers_complete``'s check)
            # The head: up to its first empty line (the request line holds no CR). ``find``
            # parses its arguments (~350 instructions compiled, 3.11); ``partition`` does not but
            # copies what follows the head (a 1 KiB body: a large allocation and ~800 in all).
            # So ``partition`` only for a small read.
            if len(raw) <= _PARTITION_MAX_BYTES:
                head = _partition(raw, b"\r\n\r\n")[0]
            else:
                head = raw[: _find(raw, b"\r\n\r\n")]
            # The request line's length if the head begins the read: llhttp takes one space
            # after the method and one before the 8-byte version.
            cr = len(method) + len(self._url) + 10
            if (
                len(head) + 4 <= self._max_header
                and head.startswith(method)  # not led by empty lines (llhttp skips them)
                and (len(head) == cr or (len(head) > cr + 1 and head[cr] == 13 and head[cr + 1] == 10))
                and head[cr - 3] == 0x31  # "HTTP/1.x": 1.1 or 1.0 (else the listing parser answers)
                and (head[cr - 1] == 0x31 or head[cr - 1] == 0x30)
            ):
                block = head[cr:]
                plain = plain_lines(block)
                if plain is not None:
                    lines, length, self._connection_header = plain
                    if length > self._max_body:  # refused before a byte of the body is read
                        self._error = TOO_LARGE
                        raise _Stop
                    if length > 0:
                        self._length = length
                    self._block = block
                    self._lines = lines
                    self._lean_method = method
                    self._http10 = head[cr - 1] == 0x30
                    self._next = len(head) + 4 + self._length
                    return
        self._replay_from = start
        raise _Replay

    def on_body(self, body: bytes) -> None:
        size = self._body_bytes + len(body)
        if size > self._uncounted_body:
            self._count_body(size)
        self._body_bytes = size
        self._expect_continue = False
        held = self._body
        if held is None:
            self._body = body
        elif isinstance(held, bytes):
            self._body = [held, body]
        else:
            held.append(body)

    def _count_body(self, size: int) -> None:
        """The body being read has grown to ``size``: count it, or raise _Stop past a limit."""
        if size > self._max_body:
            # Chunked bodies are counted as they arrive: refuse at the first excess byte.
            self._error = TOO_LARGE
            raise _Stop
        ctx = self.ctx
        more = size - self._counted
        if ctx.body_held + more > self._max_held and not ctx.make_room(more, self._counted):
            self._error = BUFFER_FULL
            raise _Stop
        ctx.body_held += more
        self._counted = size

    def on_message_complete(self) -> None:
        if self.closing:
            self._drop_body()
            self._in_message = False
            return
        keep_alive = self._keeps_alive()
        lines = self._lines
        if lines is not None:  # read lean: method and version read from its request line
            method = self._lean_method
            http10 = self._http10
        else:
            method = self._method()
            http10 = False
            # get_http_version() costs ~1 µs: only ask when another version than 1.1 is possible
            # (no keep-alive, or an explicit Connection header, which 1.0 needs for keep-alive).
            if not keep_alive or self._connection_header:
                version = self._version()
                if version != "1.1":
                    if version != "1.0":
                        # llhttp takes a request line without version for HTTP/0.9, parses 2.0.
                        self._error = NO_VERSION if version == "0.9" else VERSION_NOT_SUPPORTED
                        raise _Stop
                    http10 = True
        self._in_message = False
        keep_alive = keep_alive and not self.ctx.draining
        parts = self._body
        body = b"" if parts is None else parts if isinstance(parts, bytes) else b"".join(parts)
        resp = H1Responder(self, keep_alive, method, http10)
        if self._counted:
            self._held += self._counted
            self._counted = 0
        outstanding = self._enqueue(resp)
        self._deadline = 0.0
        if not keep_alive:
            # Anything after a closing request is dropped, but reading goes on so that the
            # client going away is still noticed while the answer is being prepared.
            self.closing = True
            self._discarding = True
        elif outstanding >= self.limits.h1_max_pipelined and self.transport is not None:
            self.transport.pause_reading()
            self._reading_paused = True
        if lines is None:
            request = Request(method, self._url, self._headers, body, False)
        else:
            request = Request(method, self._url, None, body, False, self._block, lines)
        resp._task = dispatch(self.loop, self.ctx.handler, request, resp)

    # -- internals ------------------------------------------------------------------------------

    def _detect(self, data: bytes) -> bytes | None:
        """Route the connection by its first bytes; None while undecided or handed to h2."""
        if self._preface:
            data = self._preface + data
        kind = classify_preface(data)
        if kind == "h1":
            self._detecting = False
            self._preface = b""
            return data
        if kind == "more":
            self._preface = data
            return None
        self._detecting = False
        transport = self.transport
        assert transport is not None
        self.ctx.connections.discard(self)
        h2conn = Http2Connection(self.ctx)
        transport.set_protocol(h2conn)
        h2conn.connection_made(transport)
        h2conn.data_received(data)
        return None

    def _resume_after_upgrade(self, data: bytes, offset: int) -> bool:
        while True:
            try:
                self._feed(data[offset:])
                return True
            except httptools.HttpParserUpgrade as exc:
                offset += int(exc.args[0])
            except httptools.HttpParserError:
                error, self._error = self._error, None
                self._fail(error or MALFORMED)
                return False

    def _fail(self, answer: ErrorAnswer) -> None:
        """Answer a broken request after the outstanding answers, then close (lingering)."""
        if self.ctx.on_refusal is not None:
            self.ctx.on_refusal(self._url if self._in_message else b"", answer[0])
        self._drop_body()
        self.closing = True
        self._discarding = True
        self._in_message = False
        self._deadline = 0.0
        resp = H1Responder(self, False, b"", False)
        resp._linger = True
        self._enqueue(resp)
        resp.respond(*answer)

    # -- the answer queue (the head and the answers behind it) ---------------------------------
    def _enqueue(self, resp: H1Responder) -> int:
        """Queue ``resp`` last; how many answers are outstanding now."""
        if self._head is None:
            self._head = resp
            return 1
        self._behind.append(resp)
        return 1 + len(self._behind)

    def _last(self) -> H1Responder | None:
        behind = self._behind
        return behind[-1] if behind else self._head

    def _drop_queue(self) -> None:
        """Every queued answer is dropped, never sent: their handlers see a disconnect."""
        head, behind = self._head, self._behind
        self._head = None
        self._behind = []
        if head is not None:
            head._mark_disconnected()
        for resp in behind:
            resp._mark_disconnected()

    # -- http1_responder.AnswerQueue -------------------------------------------------------
    def closes_after(self, resp: H1Responder) -> bool:
        # Closing (a refusal or a handler's ``connection: close``) or draining (server
        # shutdown, and no request half-read): the last queued answer is the connection's last.
        if self.closing:
            return self._last() is resp
        return self.ctx.draining and self._last() is resp and not self._in_message

    def is_head(self, resp: H1Responder) -> bool:
        return self._head is resp

    def emit(self, resp: H1Responder, data: bytes) -> None:
        if self._head is resp:
            self._write(data)
        elif resp._pending is None:
            resp._pending = [data]
        else:
            resp._pending.append(data)

    def sends(self, resp: H1Responder, data: bytes) -> bool:
        # ``_write``, not ``transport.write``: compiled, a call by name looks the method up.
        if self._head is resp:
            self._write(data)
            return not self.write_paused
        self.emit(resp, data)
        return False

    def answer_done(self, resp: H1Responder) -> None:
        """``resp`` finished; if it is the head, advance the queue."""
        if self._head is not resp:
            return
        transport = self.transport
        assert transport is not None
        behind = self._behind
        head = resp
        while True:
            if head._close:
                self._head = None
                self._drop_queue()  # the answers behind the connection's last one
                self._close(head._linger)
                return
            if not behind:
                self._head = None
                break
            head = self._head = behind.pop(0)
            if head._pending is not None:
                transport.writelines(head._pending)
                head._pending = None
            if head._state != DONE:
                head._wake_head()
                return
        # Nothing outstanding: the bodies of the answered requests are no longer held.
        if self._held:
            self.ctx.body_held -= self._held
            self._held = 0
        if self.closing or (self.ctx.draining and not self._in_message):
            self._close(False)
            return
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if not self._in_message:
            self._deadline = self._clock() + self.limits.idle_timeout_s
        elif self._expect_continue and self._headers_done:
            self._expect_continue = False
            transport.write(CONTINUE_100)

    # -- request body memory (ServerContext.body_held) -------------------------------------------
    def _drop_body(self) -> None:
        """The body being read is dropped (refused, timed out, connection lost)."""
        self.ctx.body_held -= self._counted
        self._counted = 0
        self._body = None
        self._body_bytes = 0

    def largest_body(self) -> int:
        return self._counted

    def shed_body(self) -> None:
        if self._counted:
            self._fail(BUFFER_FULL)

    def _close(self, linger: bool) -> None:
        # Nothing is dispatched or answered after the last answer (it may be a handler's own
        # ``connection: close``, with more requests already parsed from the same read).
        self.closing = True
        self._discarding = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if linger and transport.can_write_eof():
            # Drain what the client still sends so it reads our answer, not a reset.
            self._discarding = True
            self._lingering = True
            self._deadline = self._clock() + self.limits.linger_s
            transport.write_eof()
            if self._reading_paused:
                self._reading_paused = False
                transport.resume_reading()
        else:
            transport.close()

    # -- Connection (server side) --------------------------------------------------------------

    def check_timeouts(self, now: float) -> None:
        deadline = self._deadline
        if not deadline or now < deadline or self.transport is None:
            return
        if self._lingering:
            self.transport.abort()
        elif self._in_message:
            self._fail(TIMED_OUT)
        elif self._head is None:
            self._stuck_size = still_draining(self.transport, self._stuck_size)
            if self._stuck_size:
                self._deadline = now + self.limits.write_timeout_s
            else:
                close_idle(self.transport)

    def shutdown(self) -> None:
        if self._head is None and not self._in_message and self.transport is not None:
            self.transport.close()

    def kill(self) -> None:
        if self.transport is not None:
            self.transport.abort()
