"""h2c prior-knowledge behaviour of the shared server over real loopback sockets (raw h2 client)."""

from __future__ import annotations

import asyncio
import json

import h2.connection
from h2.errors import ErrorCodes

from dataplane.http import ClientDisconnected, Request, Responder
from tests.fakes.http_server import H2Client, serving

TEXT = [(b"content-type", b"text/plain")]


async def echo(req: Request, resp: Responder) -> None:
    """Answers with the method, path, host and body of the request."""
    if req.path.startswith(b"/sleep/"):
        await asyncio.sleep(float(req.path[7:]))
    host = req.header(b"host") or b"-"
    resp.respond(
        200, [*TEXT, (b"connection", b"keep-alive")], b"%s %s %s %s" % (req.method, req.path, host, req.body)
    )


async def test_many_concurrent_streams_on_one_connection() -> None:
    """300 concurrent streams on one connection are all answered, each with its own body."""
    async with serving(echo) as server:
        client = await H2Client.open(server.port)
        sids = [client.request(b"POST", b"/sleep/0.05", b"n%d" % i) for i in range(300)]
        for i, sid in enumerate(sids):
            st = await client.response(sid)
            assert st.status == 200
            assert bytes(st.body) == b"POST /sleep/0.05 t n%d" % i
            names = [name for name, _ in st.headers]
            assert b"connection" not in names  # RFC 9113 §8.2.2: connection-specific, dropped
            assert dict(st.headers)[b"content-length"] == b"%d" % len(st.body)
        assert server.connection_count == 1
        await client.close()


async def test_large_upload_beyond_the_default_window() -> None:
    """A 20 MiB upload (more than every window) arrives whole: the server returns credit as it reads."""
    body = bytes(range(256)) * (20 * 4096)
    seen: list[int] = []

    async def size(req: Request, resp: Responder) -> None:
        seen.append(len(req.body))
        resp.respond(200, TEXT, b"%d %d" % (len(req.body), sum(req.body[::4096])))

    async with serving(size, max_body_bytes=64 * 1024 * 1024) as server:
        client = await H2Client.open(server.port)
        sid = client.request(b"POST", b"/up", end=False)
        await client.send_body(sid, body)
        st = await client.response(sid, wait_s=20)
        assert bytes(st.body) == b"%d %d" % (len(body), sum(body[::4096]))
        await client.close()


async def test_slow_reading_stream_does_not_block_others() -> None:
    """A stream whose reader never returns credit stalls alone; other streams on the connection finish."""
    big = b"z" * (4 * 1024 * 1024)

    async def answer(req: Request, resp: Responder) -> None:
        if req.path == b"/big":
            resp.start(200, TEXT)
            for i in range(0, len(big), 256 * 1024):
                await resp.write(big[i : i + 256 * 1024])
            resp.end()
        else:
            resp.respond(200, TEXT, req.body)

    async with serving(answer) as server:
        client = await H2Client.open(server.port)
        slow = client.request(b"GET", b"/big")
        client.no_ack.add(slow)
        upload = client.request(b"POST", b"/echo", end=False)
        await client.send_body(upload, b"u" * (3 * 1024 * 1024))
        fast = [client.request(b"POST", b"/echo", b"f%d" % i) for i in range(20)]
        for i, sid in enumerate(fast):
            assert bytes((await client.response(sid)).body) == b"f%d" % i
        assert len((await client.response(upload)).body) == 3 * 1024 * 1024
        stalled = client.streams[slow]
        assert not stalled.ended.is_set()
        assert 0 < len(stalled.body) < len(big)  # stopped at the client's stream window
        client.ack(slow)
        while not stalled.ended.is_set():
            await asyncio.sleep(0.01)
            client.ack(slow)
        assert bytes(stalled.body) == big
        await client.close()


async def test_streamed_answer_arrives_frame_by_frame() -> None:
    """A streamed h2 answer reaches the client as separate DATA frames, spaced as written."""

    async def stream(req: Request, resp: Responder) -> None:
        resp.start(200, [(b"content-type", b"text/event-stream"), (b"transfer-encoding", b"chunked")])
        for i in range(3):
            await resp.write(b"data: %d\n\n" % i)
            await asyncio.sleep(0.15)
        resp.end()

    async with serving(stream) as server:
        client = await H2Client.open(server.port)
        st = await client.response(client.request(b"GET", b"/s"))
        assert bytes(st.body) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert b"transfer-encoding" not in dict(st.headers)
        times = [t for t, data in st.chunks if data]
        assert len(times) == 3
        assert times[1] - times[0] > 0.1 and times[2] - times[1] > 0.1
        await client.close()


async def test_stream_reset_is_seen_by_the_handler() -> None:
    """A client RST_STREAM marks that request ``disconnected``; the connection keeps serving."""
    seen: asyncio.Queue[bool] = asyncio.Queue()
    callbacks: list[int] = []

    async def waits(req: Request, resp: Responder) -> None:
        if req.path == b"/wait":
            resp.on_disconnect(lambda: callbacks.append(1))
            await resp.wait_disconnected()
            await seen.put(resp.disconnected)
        else:
            resp.respond(200, TEXT, b"ok")

    async with serving(waits) as server:
        client = await H2Client.open(server.port)
        sid = client.request(b"GET", b"/wait")
        await asyncio.sleep(0.1)
        client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        client.flush()
        assert await asyncio.wait_for(seen.get(), 3) is True
        assert callbacks == [1]
        assert bytes((await client.response(client.request(b"GET", b"/other"))).body) == b"ok"
        await client.close()


async def test_oversized_upload_is_refused() -> None:
    """An announced or actual body over the limit gets 413 then RST_STREAM(NO_ERROR); the connection lives."""
    async with serving(echo, max_body_bytes=1000) as server:
        client = await H2Client.open(server.port)
        announced = client.request(b"POST", b"/a", headers=[(b"content-length", b"1073741824")], end=False)
        st = await client.response(announced)
        assert st.status == 413
        assert dict(st.headers)[b"x-router-error-code"] == b"payload_too_large"
        assert json.loads(bytes(st.body))["error"]["code"] == "payload_too_large"
        sent = client.request(b"POST", b"/b", end=False)
        await client.send_body(sent, b"q" * 5000, end=False)
        st = await client.response(sent)
        assert st.status == 413
        await asyncio.sleep(0.05)
        assert st.reset == ErrorCodes.NO_ERROR
        assert (
            bytes((await client.response(client.request(b"POST", b"/c", b"fine"))).body) == b"POST /c t fine"
        )
        await client.close()


async def test_handler_exception_answers_500_on_its_stream_only() -> None:
    """A handler that raises answers 500 on its stream; concurrent streams are unaffected."""

    async def flaky(req: Request, resp: Responder) -> None:
        if req.path == b"/boom":
            raise ValueError("bug")
        await asyncio.sleep(0.05)
        resp.respond(200, TEXT, b"fine")

    async with serving(flaky) as server:
        client = await H2Client.open(server.port)
        ok1 = client.request(b"GET", b"/a")
        boom = client.request(b"GET", b"/boom")
        ok2 = client.request(b"GET", b"/b")
        st = await client.response(boom)
        assert st.status == 500
        assert json.loads(bytes(st.body))["error"]["code"] == "internal_error"
        assert bytes((await client.response(ok1)).body) == b"fine"
        assert bytes((await client.response(ok2)).body) == b"fine"
        await client.close()


async def test_incomplete_stream_hits_the_read_timeout() -> None:
    """A stream whose body never ends gets 408 after ``read_timeout_s``; others are unaffected."""
    async with serving(echo, read_timeout_s=0.3) as server:
        client = await H2Client.open(server.port)
        stuck = client.request(b"POST", b"/stuck", b"partial", end=False)
        st = await client.response(stuck, wait_s=3)
        assert st.status == 408
        assert bytes((await client.response(client.request(b"GET", b"/x"))).body) == b"GET /x t "
        await client.close()


async def test_idle_connection_gets_goaway_and_close() -> None:
    """An h2 connection without streams for ``idle_timeout_s`` gets GOAWAY and is closed."""
    async with serving(echo, idle_timeout_s=0.3) as server:
        client = await H2Client.open(server.port)
        await client.response(client.request(b"GET", b"/x"))
        await asyncio.wait_for(client.closed.wait(), 3)
        assert client.terminated is not None and client.terminated.error_code == ErrorCodes.NO_ERROR
        await client.close()


async def test_drain_sends_goaway_and_lets_open_streams_finish() -> None:
    """``drain`` sends GOAWAY at once and closes only after the in-flight stream is answered."""
    async with serving(echo) as server:
        client = await H2Client.open(server.port)
        sid = client.request(b"GET", b"/sleep/0.3")
        await asyncio.sleep(0.1)
        drain = asyncio.create_task(server.drain(3))
        st = await client.response(sid)
        assert st.status == 200 and bytes(st.body) == b"GET /sleep/0.3 t "
        assert client.terminated is not None and client.terminated.last_stream_id == sid
        await asyncio.wait_for(drain, 3)
        await asyncio.wait_for(client.closed.wait(), 3)
        await client.close()


async def test_head_and_bodyless_statuses() -> None:
    """HEAD gets content-length without DATA; a 204 carries no content-length."""

    async def answer(req: Request, resp: Responder) -> None:
        if req.method == b"HEAD":
            resp.respond(200, TEXT, b"twelve bytes")
        else:
            resp.respond(204, [], b"")

    async with serving(answer) as server:
        client = await H2Client.open(server.port)
        head = await client.response(client.request(b"HEAD", b"/"))
        assert dict(head.headers)[b"content-length"] == b"12" and not head.body
        empty = await client.response(client.request(b"DELETE", b"/"))
        assert empty.status == 204 and b"content-length" not in dict(empty.headers)
        await client.close()


async def test_invalid_answer_from_handler_becomes_500() -> None:
    """A handler answering with an impossible status gets a 500 on its stream, not a hung stream."""

    async def bad(req: Request, resp: Responder) -> None:
        resp.respond(-1, TEXT, b"nope")

    async with serving(bad) as server:
        client = await H2Client.open(server.port)
        assert (await client.response(client.request(b"GET", b"/"))).status == 500
        await client.close()


async def test_stream_without_credit_is_reset_after_the_write_timeout() -> None:
    """A stream the client gives no credit is reset after write_timeout_s; the connection keeps serving."""
    outcome: asyncio.Queue[str] = asyncio.Queue()

    async def answer(req: Request, resp: Responder) -> None:
        if req.path != b"/flood":
            resp.respond(200, TEXT, b"ok")
            return
        resp.start(200, TEXT)
        try:
            while True:
                await resp.write(b"x" * 65536)
        except ClientDisconnected:
            await outcome.put("disconnected")

    async with serving(answer, write_timeout_s=0.3) as server:
        client = await H2Client.open(server.port)
        flood = client.request(b"GET", b"/flood")
        client.no_ack.add(flood)
        assert await asyncio.wait_for(outcome.get(), 5) == "disconnected"
        st = await client.response(flood)
        assert st.reset == ErrorCodes.INTERNAL_ERROR
        assert bytes((await client.response(client.request(b"GET", b"/x"))).body) == b"ok"
        await client.close()


async def test_trailers_are_ignored_and_settings_advertised() -> None:
    """Request trailers are ignored (the body still arrives); our SETTINGS carry the configured limits."""
    async with serving(echo, h2_max_concurrent_streams=77, h2_initial_window_bytes=1 << 20) as server:
        client = await H2Client.open(server.port)
        remote = client.conn.remote_settings
        assert remote.max_concurrent_streams == 77
        assert remote.initial_window_size == 1 << 20
        assert remote.enable_push == 0
        sid = client.request(b"POST", b"/t", b"body", headers=[(b"te", b"trailers")], end=False)
        client.conn.send_headers(sid, [(b"x-checksum", b"abc")], end_stream=True)
        client.flush()
        st = await client.response(sid)
        assert bytes(st.body) == b"POST /t t body"
        await client.close()


async def test_rapid_reset_flood_gets_enhance_your_calm() -> None:
    """A client that resets its requests faster than they finish gets GOAWAY(ENHANCE_YOUR_CALM) (CVE-2023-44487)."""
    started = 0

    async def slow(req: Request, resp: Responder) -> None:
        nonlocal started
        started += 1
        await asyncio.sleep(1)
        resp.respond(200, TEXT, b"late")

    async with serving(slow) as server:
        client = await H2Client.open(server.port)
        for _ in range(300):
            sid = client.request(b"GET", b"/")
            client.conn.reset_stream(sid, ErrorCodes.CANCEL)
        client.flush()
        await asyncio.wait_for(client.closed.wait(), 3)
        assert client.terminated is not None
        assert client.terminated.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert started < 300
        await client.close()


async def test_open_streams_are_answered_after_a_client_goaway() -> None:
    """After a client's graceful GOAWAY, its in-flight stream is still answered, then the connection closes."""
    async with serving(echo) as server:
        client = await H2Client.open(server.port)
        sid = client.request(b"GET", b"/sleep/0.2")
        await asyncio.sleep(0.05)
        client.conn.close_connection()
        client.flush()
        # python-h2 would drop the answer after its own GOAWAY: keep the test client listening.
        client.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        st = await client.response(sid)
        assert st.status == 200 and bytes(st.body) == b"GET /sleep/0.2 t "
        await asyncio.wait_for(client.closed.wait(), 3)
        await client.close()
