"""The h2c upstream's callback-driven exchange (``H2Pool.start``: a listener, no task) against a
scripted h2c server on loopback: every way it ends is told to the listener exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from h2.errors import ErrorCodes

from dataplane.errors import RouterError, UpstreamBodyIncomplete, UpstreamTimeout, UpstreamUnreachable
from dataplane.router.upstream.base import ResponseListener, StreamedResponse
from dataplane.router.upstream.h2c.pool import H2Pool
from dataplane.router.upstream.h2c.stream import H2Stream
from tests.fakes.scripted_h2c import ScriptedServer


class Told(ResponseListener):
    """A ``ResponseListener`` that records what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.body_when_told: bytes | None = None  # what ``path.exchange`` would answer in one write
        self.first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_response(self, response: StreamedResponse) -> None:
        self.body_when_told = response.buffered_body()
        self._told("response", response)

    def on_failure(self, error: RouterError) -> None:
        self._told("failure", error)

    def _told(self, kind: str, what: object) -> None:
        self.events.append((kind, what))
        if not self.first.done():
            self.first.set_result(None)

    async def outcome(self) -> tuple[str, object]:
        await asyncio.wait_for(self.first, 5)
        await asyncio.sleep(0.05)  # anything told twice would show now
        assert len(self.events) == 1, self.events
        return self.events[0]


async def _warm_pool(port: int) -> H2Pool:
    """A pool whose connection has heard from the worker (``start`` needs one)."""
    pool = H2Pool("127.0.0.1", port)
    resp = await pool.request(b"GET", b"/echo", [], b"", timeout_s=5)
    assert b"".join([c async for c in resp.chunks()]) == b"0"
    return pool


async def _until(condition: Callable[[], bool], pause_s: float = 0.0) -> None:
    """Let the loop run until ``condition()`` (bounded: 5 s at most)."""
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        if condition():
            return
        assert asyncio.get_running_loop().time() < deadline, "condition never met"
        await asyncio.sleep(pause_s)


def _start(pool: H2Pool, path: bytes, told: Told, timeout_s: float = 5.0) -> H2Stream:
    stream = pool.start(b"GET", path, [], b"", timeout_s=timeout_s, listener=told)
    assert stream is not None
    return stream


async def test_start_needs_a_connection_that_heard_from_the_worker(h2_server: ScriptedServer) -> None:
    """On a pool with no connection ``start`` returns None (the caller connects in a task)."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    assert pool.start(b"GET", b"/echo", [], b"", timeout_s=5, listener=Told()) is None
    assert h2_server.requests == 0
    await pool.close()


async def test_head_and_body_in_one_read_are_one_complete_answer(h2_server: ScriptedServer) -> None:
    """HEADERS and DATA(END_STREAM) in one read: the listener is told once, with the whole body buffered."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/whole", told)
    kind, response = await told.outcome()
    assert kind == "response"
    assert isinstance(response, H2Stream)
    assert response.status == 200
    assert told.body_when_told == b"whole"
    await pool.close()


async def test_streamed_answer_is_told_at_its_head(h2_server: ScriptedServer) -> None:
    """A streamed answer is told at its head; its chunks then arrive through ``chunks()``."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/stream?n=3&ms=20", told)
    kind, response = await told.outcome()
    assert kind == "response"
    assert isinstance(response, H2Stream)
    assert told.body_when_told is None
    assert b"".join([c async for c in response.chunks()]) == b"chunk-0\nchunk-1\nchunk-2\n"
    await pool.close()


async def test_refused_stream_is_retried_then_unreachable(h2_server: ScriptedServer) -> None:
    """REFUSED_STREAM twice: tried twice on the worker, then told UpstreamUnreachable."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/refuse", told)
    kind, error = await told.outcome()
    assert kind == "failure"
    assert isinstance(error, UpstreamUnreachable)
    assert h2_server.requests == 1 + 2
    await pool.close()


async def test_goaway_refused_stream_is_answered_on_a_fresh_connection(h2_server: ScriptedServer) -> None:
    """A stream above a GOAWAY's last_stream_id is resent on a new connection and its answer told."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/goaway", told)
    kind, response = await told.outcome()
    assert kind == "response"
    assert isinstance(response, H2Stream)
    body = told.body_when_told  # the whole answer, or None: then it streams
    assert (body if body is not None else b"".join([c async for c in response.chunks()])) == b"fresh"
    assert len(h2_server.connections) == 2
    await pool.close()


async def test_abandon_during_the_retry_tells_nobody(h2_server: ScriptedServer) -> None:
    """The client leaving while a refused stream is being retried cancels the retry: nothing is told."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    first = pool._conns[0]
    stream = _start(pool, b"/goaway", told)
    await _until(lambda: first.draining)  # the GOAWAY arrived: the retry is under way
    stream.abandon()
    await asyncio.sleep(0.3)
    assert told.events == []
    await pool.close()


async def test_reset_after_the_head_fails_the_body(h2_server: ScriptedServer) -> None:
    """RST_STREAM after the head: told the head, then the body ends in UpstreamBodyIncomplete."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/reset", told)
    kind, response = await told.outcome()
    assert kind == "response"
    assert isinstance(response, H2Stream)
    got = b""
    with pytest.raises(UpstreamBodyIncomplete):
        async for chunk in response.chunks():
            got += chunk
    assert got == b"partial"
    await pool.close()


async def test_timeout_before_the_head_is_told_and_resets(h2_server: ScriptedServer) -> None:
    """No head within timeout_s: told UpstreamTimeout, the worker sees RST_STREAM(CANCEL)."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/hang", told, timeout_s=0.2)
    kind, error = await told.outcome()
    assert kind == "failure"
    assert isinstance(error, UpstreamTimeout)
    assert h2_server.resets == [ErrorCodes.CANCEL]
    await pool.close()


async def test_hung_worker_ejection_fails_a_listened_stream(h2_server: ScriptedServer) -> None:
    """``fail_stalled`` (the worker stopped answering health checks) tells a waiting listener UpstreamTimeout."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/hang", told)
    await asyncio.sleep(0.05)
    assert pool.fail_stalled(asyncio.get_running_loop().time()) == 1
    kind, error = await told.outcome()
    assert kind == "failure"
    assert isinstance(error, UpstreamTimeout)
    await pool.close()


async def test_connection_lost_before_the_head_is_incomplete(h2_server: ScriptedServer) -> None:
    """The worker's connection closing before the head: told UpstreamBodyIncomplete (the request was sent)."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    _start(pool, b"/hang", told)
    await _until(lambda: h2_server.requests >= 2, 0.01)
    transport = h2_server.connections[0].transport
    assert transport is not None
    transport.close()
    kind, error = await told.outcome()
    assert kind == "failure"
    assert isinstance(error, UpstreamBodyIncomplete)
    await pool.close()


async def test_abandon_before_the_head_resets_and_tells_nobody(h2_server: ScriptedServer) -> None:
    """The client leaving before the head: RST_STREAM(CANCEL), nothing told, the connection serves on."""
    pool = await _warm_pool(h2_server.port)
    told = Told()
    stream = _start(pool, b"/hang", told)
    await _until(lambda: h2_server.requests >= 2, 0.01)
    stream.abandon()
    await asyncio.sleep(0.1)
    assert told.events == []
    assert h2_server.resets == [ErrorCodes.CANCEL]
    again = Told()
    _start(pool, b"/whole", again)
    assert (await again.outcome())[0] == "response"
    assert len(h2_server.connections) == 1
    await pool.close()
