"""HTTP/1.1 behaviour of the shared server over real loopback sockets."""

from __future__ import annotations

import asyncio
import json

import pytest

from dataplane.http import DEFERRED, ClientDisconnected, Deferred, Request, Responder, spawn
from tests.fakes.http_server import get, h1_open, post, serving

TEXT = [(b"content-type", b"text/plain")]


async def echo(req: Request, resp: Responder) -> None:
    """Answers ``<method> <path> <body length>`` and echoes the body."""
    if req.path.startswith(b"/sleep/"):
        await asyncio.sleep(float(req.path[7:]))
    resp.respond(
        200, [*TEXT, (b"x-len", b"%d" % len(req.body))], req.method + b" " + req.path + b" " + req.body
    )


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    """Two requests on one connection are both answered and the connection stays open."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        for i in range(3):
            wr.write(post("/a", b"x" * i))
            answer = await rd.read()
            assert answer.status == 200
            assert answer.body == b"POST /a " + b"x" * i
            assert answer.header(b"content-length") == b"%d" % len(answer.body)
            assert answer.header(b"connection") is None
        assert server.connection_count == 1
        wr.close()


async def test_sync_handler_answers_without_awaiting() -> None:
    """A plain (non-async) handler that answers at once is served like an async one."""

    def hello(req: Request, resp: Responder) -> None:
        resp.respond(200, TEXT, b"hi")

    async with serving(hello) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get() + get())
        assert (await rd.read()).body == b"hi"
        assert (await rd.read()).body == b"hi"
        wr.close()


async def test_deferred_handler_answers_later_from_a_callback() -> None:
    """A handler returning DEFERRED is answered when its callback runs, in request order."""

    def later(req: Request, resp: Responder) -> Deferred:
        delay = 0.1 if req.path == b"/slow" else 0.0
        asyncio.get_running_loop().call_later(delay, resp.respond, 200, TEXT, req.path)
        return DEFERRED

    async with serving(later) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/slow") + get("/fast"))
        assert (await rd.read()).body == b"/slow"
        assert (await rd.read()).body == b"/fast"
        wr.close()


async def test_spawned_rest_of_a_deferred_answer_that_raises_answers_500() -> None:
    """A deferred handler's task (``spawn``) that raises gets the 500 envelope, like a coroutine handler."""

    async def broken() -> None:
        raise RuntimeError("bug")

    def deferred(req: Request, resp: Responder) -> Deferred:
        spawn(asyncio.get_running_loop(), broken(), req, resp)
        return DEFERRED

    async with serving(deferred) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get())
        answer = await rd.read()
        assert answer.status == 500
        assert answer.header(b"x-router-error-code") == b"internal_error"
        wr.close()


async def test_pipelined_requests_are_answered_in_request_order() -> None:
    """Pipelined requests get their answers in request order even when earlier ones finish last."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/sleep/0.3") + get("/sleep/0.1") + get("/sleep/0") + post("/p", b"body"))
        bodies = [(await rd.read()).body for _ in range(4)]
        assert bodies == [b"GET /sleep/0.3 ", b"GET /sleep/0.1 ", b"GET /sleep/0 ", b"POST /p body"]
        wr.close()


async def test_a_client_pipelining_past_the_limit_is_not_read_until_its_answers_went_out() -> None:
    """With h1_max_pipelined answers outstanding, the connection's next request waits unread
    (reading paused: a pipelining client holds at most that many requests in the server)."""
    arrived: asyncio.Queue[bytes] = asyncio.Queue()
    release = asyncio.Event()

    async def held(req: Request, resp: Responder) -> None:
        arrived.put_nowait(req.path)
        await release.wait()
        resp.respond(200, TEXT, req.path)

    async with serving(held, h1_max_pipelined=2) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/1"))
        assert await asyncio.wait_for(arrived.get(), 5) == b"/1"
        wr.write(get("/2"))
        assert await asyncio.wait_for(arrived.get(), 5) == b"/2"
        wr.write(get("/3"))
        await asyncio.sleep(0.2)  # long enough for the server to read it, were it reading
        assert arrived.empty()
        release.set()
        assert [(await rd.read()).body for _ in range(3)] == [b"/1", b"/2", b"/3"]
        assert arrived.get_nowait() == b"/3"
        wr.close()


async def test_chunked_request_body_is_assembled() -> None:
    """A chunked request body reaches the handler whole."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST /c HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in (b"hel", b"lo ", b"world"):
            wr.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await asyncio.sleep(0.01)
        wr.write(b"0\r\n\r\n")
        answer = await rd.read()
        assert answer.body == b"POST /c hello world"
        wr.close()


@pytest.mark.parametrize(
    ("length", "status"),
    [(b"0" * 30 + b"5", 200), (b"0" * 30 + b"1025", 413), (b"18446744073709551615", 413)],
)
async def test_content_length_is_read_as_the_number_its_digits_spell(length: bytes, status: int) -> None:
    """Leading zeros are digits (RFC 9110 §8.6): a zero-padded length is its number; past the
    limit, even of 20 digits, the answer is 413 before the body."""
    async with serving(echo, max_body_bytes=1024) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST /z HTTP/1.1\r\nhost: t\r\ncontent-length: " + length + b"\r\n\r\nhello")
        answer = await rd.read(wait_s=2)
        assert answer.status == status
        if status == 200:
            assert answer.body == b"POST /z hello"
        wr.close()


async def test_announced_oversized_body_is_refused_before_it_is_sent() -> None:
    """A client announcing a 1 GiB body gets 413 at once, without sending any of it."""
    async with serving(echo, max_body_bytes=1024) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST /big HTTP/1.1\r\nhost: t\r\ncontent-length: 1073741824\r\n\r\n")
        answer = await rd.read(wait_s=2)
        assert answer.status == 413
        assert answer.header(b"x-router-error-code") == b"payload_too_large"
        assert answer.header(b"connection") == b"close"
        assert json.loads(answer.body)["error"]["code"] == "payload_too_large"
        assert await rd.at_eof()
        wr.close()


async def test_expect_continue_gets_413_instead_of_100_when_too_large() -> None:
    """``Expect: 100-continue`` with an oversized length gets 413 and never a 100."""
    async with serving(echo, max_body_bytes=10) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 11\r\nexpect: 100-continue\r\n\r\n")
        answer = await rd.read(wait_s=2)
        assert answer.status == 413
        wr.close()


async def test_expect_continue_gets_100_then_the_answer() -> None:
    """``Expect: 100-continue`` gets ``100 Continue`` before the client sends the body."""
    async with serving(echo) as server:
        reader, wr = await asyncio.open_connection("127.0.0.1", server.port)
        wr.write(b"POST /e HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        wr.write(b"ok")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        wr.close()


async def test_chunked_body_over_the_limit_is_refused_as_it_arrives() -> None:
    """A chunked body is refused with 413 as soon as it passes the limit, then the connection closes."""
    async with serving(echo, max_body_bytes=1000) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST /c HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(3):
            wr.write(b"%x\r\n%s\r\n" % (400, b"y" * 400))
        # The terminating chunk is never sent: the answer must not wait for it.
        answer = await rd.read(wait_s=2)
        assert answer.status == 413
        assert await rd.at_eof()
        wr.close()


async def test_content_length_with_transfer_encoding_is_refused() -> None:
    """Content-Length together with Transfer-Encoding is a 400 (RFC 9112 §6.1, smuggling)."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        wr.write(
            b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n0\r\n\r\n"
        )
        answer = await rd.read()
        assert answer.status == 400
        assert answer.header(b"x-router-error-code") == b"bad_request"
        assert json.loads(answer.body)["error"]["type"] == "invalid_request_error"
        assert await rd.at_eof()


async def test_request_line_without_a_version_is_refused() -> None:
    """``GET /path`` with no HTTP version (HTTP/0.9) gets 400 and the connection closes (RFC 9112
    §3: the version is part of the request-line); HTTP/2.0 in a request line gets 505; the
    handler never runs; HTTP/1.0 is still served."""
    seen: list[bytes] = []

    async def record(req: Request, resp: Responder) -> None:
        seen.append(req.path)
        resp.respond(200, TEXT, b"ok")

    async with serving(record) as server:
        for line, status in ((b"GET /health\r\n\r\n", 400), (b"GET /health HTTP/2.0\r\n\r\n", 505)):
            rd, wr = await h1_open(server.port)
            wr.write(line)
            answer = await rd.read()
            assert answer.status == status
            assert answer.header(b"x-router-error-code") == b"bad_request"
            assert await rd.at_eof()
            wr.close()
        assert seen == []
        rd, wr = await h1_open(server.port)
        wr.write(b"GET /ten HTTP/1.0\r\n\r\n")
        assert (await rd.read()).status == 200
        assert seen == [b"/ten"]
        wr.close()


async def test_invalid_chunking_is_refused_and_closes() -> None:
    """A malformed chunk size is a 400 and the connection closes."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        wr.write(b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n")
        answer = await rd.read()
        assert answer.status == 400
        assert await rd.at_eof()


async def test_oversized_headers_get_431() -> None:
    """Headers over ``max_header_bytes`` get 431 with the envelope, whether split or in one read."""
    async with serving(echo, max_header_bytes=2048) as server:
        for split in (False, True):
            rd, wr = await h1_open(server.port)
            raw = b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 4096 + b"\r\n\r\n"
            if split:
                for i in range(0, len(raw), 512):
                    wr.write(raw[i : i + 512])
                    await asyncio.sleep(0.005)
            else:
                wr.write(raw)
            answer = await rd.read()
            assert answer.status == 431
            assert answer.header(b"x-router-error-code") == b"bad_request"
            wr.close()


async def test_slow_client_hits_the_read_timeout() -> None:
    """A request trickling in slower than ``read_timeout_s`` gets 408 and the connection closes."""
    async with serving(echo, read_timeout_s=0.4) as server:
        rd, wr = await h1_open(server.port)
        loop = asyncio.get_running_loop()
        started = loop.time()
        wr.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 100\r\n\r\n")
        for _ in range(20):
            if rd.reader.at_eof():
                break
            wr.write(b"x")  # one byte every 100 ms: never finishes in time
            await asyncio.sleep(0.1)
            if rd.reader._buffer:  # type: ignore[attr-defined]
                break
        answer = await rd.read(wait_s=2)
        assert answer.status == 408
        assert 0.35 < loop.time() - started < 4
        assert await rd.at_eof()


async def test_idle_keep_alive_connection_is_closed() -> None:
    """A keep-alive connection with no request for ``idle_timeout_s`` is closed by the server."""
    async with serving(echo, idle_timeout_s=0.3) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get())
        assert (await rd.read()).status == 200
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await rd.at_eof(wait_s=2)
        assert 0.25 < loop.time() - started < 4
        await asyncio.sleep(0.05)
        assert server.connection_count == 0


async def test_streamed_answer_arrives_chunk_by_chunk() -> None:
    """A streamed answer reaches the client piece by piece as the handler writes it."""

    async def stream(req: Request, resp: Responder) -> None:
        resp.start(200, [(b"content-type", b"text/event-stream")])
        for i in range(3):
            await resp.write(b"data: %d\n\n" % i)
            await asyncio.sleep(0.15)
        resp.end()

    async with serving(stream) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/s"))
        answer = await rd.read()
        assert answer.header(b"transfer-encoding") == b"chunked"
        assert answer.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        times = [t for t, _ in answer.chunks]
        assert len(times) == 3
        assert times[1] - times[0] > 0.1 and times[2] - times[1] > 0.1
        wr.write(get("/again"))
        assert (await rd.read()).body == answer.body  # still keep-alive after the last chunk
        wr.close()


async def test_handler_sees_client_disconnect() -> None:
    """A handler waiting on a request sees the client go away (``disconnected``, ``write`` raises)."""
    seen: asyncio.Queue[tuple[bool, bool]] = asyncio.Queue()

    async def waits(req: Request, resp: Responder) -> None:
        await resp.wait_disconnected()
        raised = False
        resp.start(200, TEXT)
        try:
            await resp.write(b"late")
        except ClientDisconnected:
            raised = True
        await seen.put((resp.disconnected, raised))

    async with serving(waits) as server:
        _rd, wr = await h1_open(server.port)
        wr.write(get("/wait"))
        await asyncio.sleep(0.1)
        wr.close()
        assert await asyncio.wait_for(seen.get(), 3) == (True, True)


async def test_handler_exception_answers_500_and_connection_keeps_serving() -> None:
    """A handler that raises yields a 500 envelope; the next request on the connection is served."""

    async def flaky(req: Request, resp: Responder) -> None:
        if req.path == b"/boom":
            raise RuntimeError("bug")
        resp.respond(200, TEXT, b"fine")

    async with serving(flaky) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/boom"))
        answer = await rd.read()
        assert answer.status == 500
        assert answer.header(b"x-router-error-code") == b"internal_error"
        assert json.loads(answer.body) == {
            "error": {"type": "server_error", "code": "internal_error", "message": "internal error"}
        }
        wr.write(get("/ok"))
        assert (await rd.read()).body == b"fine"
        wr.close()


async def test_head_request_gets_length_but_no_body() -> None:
    """A HEAD answer carries the content-length of the GET answer and no body."""
    async with serving(echo) as server:
        reader, wr = await asyncio.open_connection("127.0.0.1", server.port)
        wr.write(b"HEAD /h HTTP/1.1\r\nhost: t\r\n\r\n" + get("/after"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert b"content-length: 8\r\n" in head  # len(b"HEAD /h ")
        nxt = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert nxt.startswith(b"HTTP/1.1 200 OK")
        wr.close()


async def _stream_one_two(req: Request, resp: Responder) -> None:
    resp.start(200, TEXT)
    await resp.write(b"one ")
    await resp.write(b"two")
    resp.end()


async def _streamed_answer(request: bytes) -> tuple[bytes, bytes]:
    """The head and body a streamed answer (``_stream_one_two``) to ``request`` reads as, up to
    the server closing the connection."""
    async with serving(_stream_one_two) as server:
        reader, wr = await asyncio.open_connection("127.0.0.1", server.port)
        wr.write(request)
        raw = await asyncio.wait_for(reader.read(), 2)
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


async def test_http10_client_is_closed_after_its_answer() -> None:
    """An HTTP/1.0 request gets its answer and the connection closes; streams are close-delimited."""
    head, body = await _streamed_answer(b"GET / HTTP/1.0\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"one two"


async def test_http10_client_asking_for_keep_alive_never_gets_chunked() -> None:
    """``Connection: keep-alive`` on an HTTP/1.0 request: the server still answers as to an
    HTTP/1.0 client (RFC 9112 §6.1: no Transfer-Encoding to a client that did not send 1.1),
    so a streamed answer is close-delimited."""
    head, body = await _streamed_answer(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"one two"


async def test_drain_finishes_in_flight_requests_and_refuses_new_ones() -> None:
    """``drain`` lets an in-flight request finish (with ``connection: close``) and stops accepting."""
    async with serving(echo) as server:
        rd, wr = await h1_open(server.port)
        idle_rd, _idle_wr = await h1_open(server.port)
        wr.write(get("/sleep/0.3"))
        await asyncio.sleep(0.1)
        drain = asyncio.create_task(server.drain(3))
        answer = await rd.read()
        assert answer.body == b"GET /sleep/0.3 "
        assert answer.header(b"connection") == b"close"
        assert await idle_rd.at_eof()
        await asyncio.wait_for(drain, 3)
        assert server.connection_count == 0
        try:
            await asyncio.open_connection("127.0.0.1", server.port)
        except OSError:
            pass
        else:
            raise AssertionError("a drained server still accepts connections")


async def test_invalid_answer_from_handler_becomes_500() -> None:
    """A handler answering with an impossible status gets a 500 envelope instead of a hung client."""

    async def bad(req: Request, resp: Responder) -> None:
        resp.respond(42, TEXT, b"nope")

    async with serving(bad) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get())
        assert (await rd.read()).status == 500
        wr.close()


async def test_disconnect_is_seen_for_a_connection_close_request() -> None:
    """A ``connection: close`` request still notices its client leaving while it is being handled."""
    seen: asyncio.Queue[bool] = asyncio.Queue()

    async def waits(req: Request, resp: Responder) -> None:
        await resp.wait_disconnected()
        await seen.put(resp.disconnected)

    async with serving(waits) as server:
        _rd, wr = await h1_open(server.port)
        wr.write(get("/", "connection: close\r\n"))
        await asyncio.sleep(0.1)
        wr.close()
        assert await asyncio.wait_for(seen.get(), 3) is True


async def test_abort_mid_stream_closes_without_the_last_chunk() -> None:
    """``abort`` during a streamed answer closes the connection; the client sees an incomplete body."""

    async def breaks(req: Request, resp: Responder) -> None:
        resp.start(200, TEXT)
        await resp.write(b"partial")
        resp.abort()

    async with serving(breaks) as server:
        reader, wr = await asyncio.open_connection("127.0.0.1", server.port)
        wr.write(get())
        raw = await asyncio.wait_for(reader.read(), 3)
        assert raw.endswith(b"7\r\npartial\r\n")  # no terminating 0-chunk: visibly truncated


async def test_answers_behind_a_closing_one_are_dropped_and_their_handlers_told() -> None:
    """Pipelined requests behind one that closes the connection see ``disconnected`` instead of hanging."""
    seen: asyncio.Queue[bool] = asyncio.Queue()

    async def answer(req: Request, resp: Responder) -> None:
        if req.path == b"/first":
            await asyncio.sleep(0.1)
            resp.respond(200, [(b"connection", b"close")], b"bye")
            return
        resp.start(200, TEXT)
        try:
            await resp.write(b"never sent")
        except ClientDisconnected:
            await seen.put(True)

    async with serving(answer) as server:
        rd, wr = await h1_open(server.port)
        wr.write(get("/first") + get("/second"))
        first = await rd.read()
        assert first.body == b"bye" and first.header(b"connection") == b"close"
        assert await rd.at_eof()
        assert await asyncio.wait_for(seen.get(), 3) is True


async def test_disconnect_callback_runs_once_when_the_client_leaves() -> None:
    """``on_disconnect`` runs its callback once when the client leaves, and at once if already gone."""
    calls: list[str] = []
    gone = asyncio.Event()

    async def waits(req: Request, resp: Responder) -> None:
        resp.on_disconnect(lambda: calls.append("first"))
        resp.on_disconnect(lambda: (calls.append("replaced"), gone.set()))
        await gone.wait()
        resp.on_disconnect(lambda: calls.append("late"))

    async with serving(waits) as server:
        _rd, wr = await h1_open(server.port)
        wr.write(get("/wait"))
        await asyncio.sleep(0.1)
        wr.close()
        await asyncio.wait_for(gone.wait(), 3)
        await asyncio.sleep(0.05)
        assert calls == ["replaced", "late"]


async def test_client_that_stops_reading_hits_the_write_timeout() -> None:
    """A streamed answer to a client that never reads fails with ClientDisconnected after write_timeout_s."""
    outcome: asyncio.Queue[str] = asyncio.Queue()

    async def flood(req: Request, resp: Responder) -> None:
        resp.start(200, TEXT)
        try:
            while True:
                await resp.write(b"x" * 65536)
        except ClientDisconnected:
            await outcome.put("disconnected")

    async with serving(flood, write_timeout_s=0.3) as server:
        _rd, wr = await h1_open(server.port)
        wr.write(get())
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(outcome.get(), 5) == "disconnected"
        assert asyncio.get_running_loop().time() - started < 3
        await asyncio.sleep(0.05)
        assert server.connection_count == 0
        wr.close()


async def test_accepted_sockets_have_tcp_nodelay() -> None:
    """Every accepted socket, HTTP/1.1 or h2c, has TCP_NODELAY set (SPEC §5)."""
    # asyncio and uvloop also set it on their own today; the server sets it explicitly so the
    # guarantee does not depend on the event loop.
    import socket

    from tests.fakes.http_server import H2Client

    async with serving(echo) as server:
        _rd, wr = await h1_open(server.port)
        wr.write(get())
        await _rd.read()
        client = await H2Client.open(server.port)
        conns = list(server._ctx.connections)  # the server's live connections (white-box: no public view)
        assert len(conns) == 2
        for conn in conns:
            sock = conn.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        await client.close()
        wr.close()


async def _small_window_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # keep the answer in the server's buffer
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


async def test_slow_reader_of_a_large_answer_is_not_idle() -> None:
    """A client slowly reading a large answer gets all of it even past idle_timeout_s."""
    big = b"b" * (8 * 1024 * 1024)

    def large(req: Request, resp: Responder) -> None:
        resp.respond(200, TEXT, big)

    async with serving(large, idle_timeout_s=0.2, write_timeout_s=1.0) as server:
        reader, wr = await _small_window_client(server.port)
        wr.write(get())
        await reader.readuntil(b"\r\n\r\n")
        received = 0
        while received < len(big):
            chunk = await asyncio.wait_for(reader.read(256 * 1024), 3)
            assert chunk, f"connection closed after {received} of {len(big)} bytes"
            received += len(chunk)
            await asyncio.sleep(0.03)
        wr.close()


async def test_stalled_reader_of_a_large_answer_is_dropped() -> None:
    """A client that stops reading a large answer is dropped after idle_timeout_s + write_timeout_s."""

    def large(req: Request, resp: Responder) -> None:
        resp.respond(200, TEXT, b"s" * (8 * 1024 * 1024))

    async with serving(large, idle_timeout_s=0.2, write_timeout_s=0.5) as server:
        _reader, wr = await _small_window_client(server.port)
        wr.write(get())
        for _ in range(60):
            await asyncio.sleep(0.05)
            if server.connection_count == 0:
                break
        assert server.connection_count == 0
        wr.close()
