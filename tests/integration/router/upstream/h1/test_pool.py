"""The HTTP/1.1 upstream pool against scripted loopback servers (framing, reuse, failures)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from dataplane.errors import RouterError
from dataplane.router.upstream.base import (
    ResponseListener,
    StreamedResponse,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from dataplane.router.upstream.h1.pool import _MAX_LINE_STARTS, H1Pool

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


class Server:
    """A loopback server running ``script`` per connection; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.closed = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.script(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                self.closed += 1
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


async def _body(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


async def test_keep_alive_reuses_one_connection() -> None:
    """Sequential requests reuse the same connection; the small answer is buffered whole."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await _read_request(reader)
            assert b"\r\nhost: 127.0.0.1:" in head and b"content-length: %d" % len(body) in head
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Echo: yes\r\n\r\n%s" % (len(body), body)
            )

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        for i in range(3):
            resp = await pool.request(b"POST", b"/x", [(b"content-type", b"a/b")], b"body%d" % i, timeout_s=5)
            assert resp.status == 200
            assert (b"x-echo", b"yes") in resp.headers
            assert all(n != b"content-length" for n, _ in resp.headers)
            assert resp.buffered_body() == b"body%d" % i
        assert server.connections == 1
        await pool.close()


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 (polls counts the server's handlers keep)
            await asyncio.sleep(0.01)


async def test_idle_connections_go_out_most_recent_first_up_to_max_idle() -> None:
    """At most ``max_idle`` connections are kept (one more is closed); the one released last
    goes out first, then the older ones; ``close`` closes every idle one."""
    opened = 0

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answers each request with this connection's number, after as many 50 ms as its body says."""
        nonlocal opened
        opened += 1
        number = b"%d" % opened
        while True:
            _, body = await _read_request(reader)
            await asyncio.sleep(0.05 * int(body))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(number), number))

    async def ask(pool: H1Pool, delay: int) -> bytes:
        answer = (await pool.request(b"POST", b"/", [], b"%d" % delay, timeout_s=5)).buffered_body()
        assert answer is not None
        return answer

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port, max_idle=2)
        # Three at once: three connections, released in the order of their delays.
        first, second, third = await asyncio.gather(ask(pool, 0), ask(pool, 1), ask(pool, 2))
        assert len({first, second, third}) == 3
        await _until(lambda: server.closed == 1)  # the third released: past max_idle
        assert await ask(pool, 0) == second  # released last of the two kept
        assert await ask(pool, 0) == second  # and again, after going back
        both = await asyncio.gather(ask(pool, 0), ask(pool, 0))
        assert sorted(both) == sorted([first, second])
        assert server.connections == 3
        await pool.close()
        await _until(lambda: server.closed == 3)


async def test_an_idle_connection_the_worker_closed_is_never_handed_out() -> None:
    """A worker closing a kept-alive connection while it is idle: ``start`` finds none idle,
    the next request opens a new connection."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()  # then the script ends: the server closes the connection

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        assert (await pool.request(b"POST", b"/", [], b"one", timeout_s=5)).buffered_body() == b"ok"
        # The close reaches the pool's connection, which leaves the idle ones.
        await _until(lambda: pool._latest is None and not pool._idle)
        assert pool.start(b"POST", b"/", [], b"x", timeout_s=5, listener=Listener()) is None
        assert (await pool.request(b"POST", b"/", [], b"two", timeout_s=5)).buffered_body() == b"ok"
        assert server.connections == 2
        await pool.close()


async def test_every_header_reaches_the_worker_as_its_own_line_in_order() -> None:
    """The head the worker reads carries each forwarded header as ``name: value``, in order:
    names the pool has sent before, and more distinct names than it keeps line starts for
    (``_MAX_LINE_STARTS``), long ones included."""
    heads: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, _ = await _read_request(reader)
            heads.append(head)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    sent: list[list[tuple[bytes, bytes]]] = []
    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        for batch in range(2 * _MAX_LINE_STARTS // 100 + 1):
            headers = [(b"x-h-%d" % (batch * 100 + i), b"v %d" % i) for i in range(100)]
            headers += [(b"x-" + b"n" * 100, b"long"), (b"content-type", b"application/json")]
            sent.append(headers)
            resp = await pool.request(b"POST", b"/p", headers, b"{}", timeout_s=5)
            assert resp.status == 200
        await pool.close()
    for headers, head in zip(sent, heads, strict=True):
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /p HTTP/1.1"
        assert lines[3:-2] == [b"%s: %s" % item for item in headers]


async def test_chunked_answer_streams_chunk_by_chunk() -> None:
    """A chunked answer is handed over as its chunks arrive, without its framing."""
    release = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nfirst\r\n"
        )
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        resp = await pool.request(b"POST", b"/s", [], b"{}", timeout_s=5)
        assert resp.buffered_body() is None
        assert [n for n, _ in resp.headers] == []  # transfer-encoding and connection removed
        chunks = resp.chunks()
        assert await anext(chunks) == b"first"
        release.set()
        assert await anext(chunks) == b"second"
        with pytest.raises(StopAsyncIteration):
            await anext(chunks)
        await pool.close()


async def test_connection_refused_is_unreachable() -> None:
    """Nothing listening: UpstreamUnreachable (safe to retry elsewhere)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamUnreachable):
        await H1Pool("127.0.0.1", port).request(b"GET", b"/", [], b"", timeout_s=2)


async def test_drop_before_answer_is_body_incomplete() -> None:
    """A worker that reads the request and closes is UpstreamBodyIncomplete, not retryable."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)

    async with Server(script) as server:
        with pytest.raises(UpstreamBodyIncomplete):
            await H1Pool("127.0.0.1", server.port).request(b"POST", b"/", [], b"{}", timeout_s=5)


async def test_drop_mid_body_is_body_incomplete() -> None:
    """A worker closing before the announced length arrived ends the chunks with an error."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()

    async with Server(script) as server:
        resp = await H1Pool("127.0.0.1", server.port).request(b"POST", b"/", [], b"{}", timeout_s=5)
        with pytest.raises(UpstreamBodyIncomplete):
            await _body(resp.chunks())


async def test_close_delimited_body_is_complete() -> None:
    """A body without length that ends with the connection is complete (RFC 9112 §6.3)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()

    async with Server(script) as server:
        resp = await H1Pool("127.0.0.1", server.port).request(b"POST", b"/", [], b"{}", timeout_s=5)
        body = resp.buffered_body()
        assert (body if body is not None else await _body(resp.chunks())) == b"all of it"


async def test_deadline_is_upstream_timeout_and_connection_not_reused() -> None:
    """Past timeout_s the request fails with UpstreamTimeout and its connection is dropped."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            _, body = await _read_request(reader)
            if body == b"slow":
                await asyncio.sleep(5)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        with pytest.raises(UpstreamTimeout):
            await pool.request(b"POST", b"/", [], b"slow", timeout_s=0.2)
        resp = await pool.request(b"POST", b"/", [], b"fast", timeout_s=2)
        assert resp.buffered_body() == b"ok"
        assert server.connections == 2
        await pool.close()


async def test_concurrent_deadlines_each_fire_on_time() -> None:
    """Exchanges in flight together each time out at their own deadline; fast ones are unaffected."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            _, body = await _read_request(reader)
            if body.startswith(b"slow"):
                await asyncio.sleep(5)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        loop = asyncio.get_running_loop()

        async def timed(body: bytes, timeout_s: float) -> float | bytes:
            started = loop.time()
            try:
                resp = await pool.request(b"POST", b"/", [], body, timeout_s=timeout_s)
            except UpstreamTimeout:
                return loop.time() - started
            return resp.buffered_body() or b""

        # The later deadline is armed first; the earlier one must still fire on time.
        late = asyncio.create_task(timed(b"slow-late", 1.5))
        await asyncio.sleep(0.05)
        early, fast = await asyncio.gather(timed(b"slow-early", 0.2), timed(b"fast", 2))
        assert fast == b"ok"
        assert isinstance(early, float) and 0.19 <= early < 1.0
        waited = await late
        assert isinstance(waited, float) and 1.49 <= waited < 2.5
        assert len(pool.deadlines) == 0  # nothing left with a deadline once every exchange ended
        await pool.close()


async def test_abort_closes_the_connection() -> None:
    """Aborting a streaming answer (client gone) closes that connection instead of reusing it."""
    closed = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        if not await reader.read(1):
            closed.set()

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        resp = await pool.request(b"POST", b"/", [], b"{}", timeout_s=5)
        assert await anext(resp.chunks()) == b"abc"
        resp.abort()
        await asyncio.wait_for(closed.wait(), 2)


class Listener(ResponseListener):
    """Records what a callback-driven exchange (``H1Pool.start``) was told."""

    def __init__(self) -> None:
        self.told: asyncio.Future[StreamedResponse | RouterError] = asyncio.get_running_loop().create_future()
        self.calls = 0

    def on_response(self, response: StreamedResponse) -> None:
        self.calls += 1
        self.told.set_result(response)

    def on_failure(self, error: RouterError) -> None:
        self.calls += 1
        self.told.set_result(error)


async def _scripted_pool(script: Script) -> AsyncIterator[tuple[Server, H1Pool]]:
    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        # One task-driven exchange leaves an idle connection for ``start`` to use.
        warm = await pool.request(b"POST", b"/", [], b"warm", timeout_s=5)
        assert warm.buffered_body() == b"ok"
        yield server, pool
        await pool.close()


async def _stalling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers ``ok`` to everything but a ``slow`` body (never answered), ``drop`` (closes),
    ``stream`` (a chunked answer whose end never comes)."""
    while True:
        _, body = await _read_request(reader)
        if body == b"slow":
            await asyncio.sleep(5)
        elif body == b"drop":
            return
        elif body == b"stream":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await writer.drain()
            await asyncio.sleep(5)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


async def test_start_needs_an_idle_connection_then_answers_through_the_listener() -> None:
    """``start`` declines without an idle connection; on one, the listener gets the complete answer."""
    async with Server(_stalling) as server:
        pool = H1Pool("127.0.0.1", server.port)
        assert pool.start(b"POST", b"/", [], b"x", timeout_s=5, listener=Listener()) is None
        (await pool.request(b"POST", b"/", [], b"warm", timeout_s=5)).buffered_body()
        listener = Listener()
        assert pool.start(b"POST", b"/", [], b"again", timeout_s=5, listener=listener) is not None
        told = await asyncio.wait_for(listener.told, 2)
        assert not isinstance(told, RouterError)
        assert told.status == 200 and told.buffered_body() == b"ok"
        assert server.connections == 1 and listener.calls == 1
        await pool.close()


async def test_start_past_the_deadline_tells_the_listener_timeout() -> None:
    """A callback-driven exchange past its deadline fails with UpstreamTimeout; its connection is dropped."""
    async for server, pool in _scripted_pool(_stalling):
        listener = Listener()
        assert pool.start(b"POST", b"/", [], b"slow", timeout_s=0.2, listener=listener) is not None
        assert isinstance(await asyncio.wait_for(listener.told, 2), UpstreamTimeout)
        assert (await pool.request(b"POST", b"/", [], b"fast", timeout_s=2)).buffered_body() == b"ok"
        assert server.connections == 2 and listener.calls == 1


async def test_start_on_a_worker_that_drops_tells_the_listener_body_incomplete() -> None:
    """A worker closing after reading the request is UpstreamBodyIncomplete for the listener."""
    async for _, pool in _scripted_pool(_stalling):
        listener = Listener()
        assert pool.start(b"POST", b"/", [], b"drop", timeout_s=5, listener=listener) is not None
        assert isinstance(await asyncio.wait_for(listener.told, 2), UpstreamBodyIncomplete)


async def test_start_hands_over_an_unfinished_answer_at_its_head() -> None:
    """A streaming answer reaches the listener at its head; the body follows through ``chunks()``."""
    async for _, pool in _scripted_pool(_stalling):
        listener = Listener()
        assert pool.start(b"POST", b"/", [], b"stream", timeout_s=5, listener=listener) is not None
        told = await asyncio.wait_for(listener.told, 2)
        assert not isinstance(told, RouterError)
        assert told.buffered_body() is None
        assert await anext(told.chunks()) == b"abc"
        told.abort()


async def test_abandoned_exchange_closes_its_connection_and_stays_silent() -> None:
    """``abandon()`` (the client left) closes the connection; the listener is never called."""
    async for server, pool in _scripted_pool(_stalling):
        listener = Listener()
        conn = pool.start(b"POST", b"/", [], b"slow", timeout_s=5, listener=listener)
        assert conn is not None
        conn.abandon()
        await asyncio.sleep(0.1)
        assert listener.calls == 0
        assert (await pool.request(b"POST", b"/", [], b"fast", timeout_s=2)).buffered_body() == b"ok"
        assert server.connections == 2


# Bytes a worker sends that no request asked for: a whole second answer, its head alone, part
# of a status line. Taken as the next request's answer they would shift every later answer to
# the wrong client.
UNASKED = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL",
    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n",
    b"HTTP/1.1 2",
    b"garbage",
]


def _answering_then(unasked: bytes, *, later: bool) -> tuple[Script, asyncio.Event]:
    """A worker answering its connection's first request with ``ok`` and then ``unasked`` (in
    the same write, or ``later`` in a write of its own), every later request with ``ok2``; the
    event is set when the router closes a connection that sent ``unasked``."""
    closed = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        if later:
            writer.write(answer)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(unasked)
        else:
            writer.write(answer + unasked)
        await writer.drain()
        if not await reader.read(65536):  # the router closed this connection
            closed.set()
            return
        while True:  # not closed: answer the requests that come anyway
            await _read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok2")

    return script, closed


@pytest.mark.parametrize("later", [False, True], ids=["same-write", "while-idle"])
@pytest.mark.parametrize("unasked", UNASKED, ids=["answer", "head", "status-line", "garbage"])
async def test_bytes_no_request_asked_for_close_the_connection(unasked: bytes, later: bool) -> None:
    """The answer before them stands; that connection is closed and never carries another
    request (the next one gets its own answer on a new connection)."""
    script, closed = _answering_then(unasked, later=later)
    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        assert (await pool.request(b"POST", b"/", [], b"1", timeout_s=5)).buffered_body() == b"ok"
        await asyncio.wait_for(closed.wait(), 5)
        assert (await pool.request(b"POST", b"/", [], b"2", timeout_s=5)).buffered_body() == b"ok"
        assert server.connections == 2
        await pool.close()


async def test_a_listener_gets_the_answer_that_came_before_unasked_bytes() -> None:
    """Callback-driven (``start``): the answer is told to the listener, not a failure, when
    bytes of another answer follow it in the same read."""
    served = 0

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        served += 1
        first = served == 1
        while True:
            await _read_request(reader)
            tail = b"" if first else UNASKED[1]
            first = False
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + tail)

    async with Server(script) as server:
        pool = H1Pool("127.0.0.1", server.port)
        assert (await pool.request(b"POST", b"/", [], b"warm", timeout_s=5)).buffered_body() == b"ok"
        listener = Listener()
        assert pool.start(b"POST", b"/", [], b"x", timeout_s=5, listener=listener) is not None
        told = await asyncio.wait_for(listener.told, 2)
        assert not isinstance(told, RouterError) and told.buffered_body() == b"ok"
        assert listener.calls == 1
        # That connection is gone: the next exchange cannot start without connecting.
        assert pool.start(b"POST", b"/", [], b"y", timeout_s=5, listener=Listener()) is None
        await pool.close()
