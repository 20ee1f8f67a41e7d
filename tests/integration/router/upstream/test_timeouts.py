"""Time-to-first-byte and idle deadlines of both upstream pools, and failing stalled exchanges
(SPEC §5 upstream_timeout), against loopback workers: a scripted HTTP/1.1 one and the shared HTTP server
speaking h2c."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dataplane.http import Request, Responder, start_server
from dataplane.router.upstream.base import UpstreamPool, UpstreamTimeout, UpstreamTimeouts
from dataplane.router.upstream.h1.pool import H1Pool
from dataplane.router.upstream.h2c.pool import H2Pool

TIMEOUTS = UpstreamTimeouts(first_byte_s=0.3, idle_s=0.3)


async def worker(req: Request, resp: Responder) -> None:
    """/stall: never answers; /head-then-stall: head and one chunk, then nothing; /drip: a chunk
    every 0.1 s for 1 s; /big: 4 MiB at once."""
    if req.path == b"/stall":
        await asyncio.sleep(60)
    resp.start(200, [(b"content-type", b"text/event-stream")])
    if req.path == b"/head-then-stall":
        await resp.write(b"data: 1\n\n")
        await asyncio.sleep(60)
    elif req.path == b"/drip":
        for i in range(10):
            await resp.write(b"data: %d\n\n" % i)
            await asyncio.sleep(0.1)
    elif req.path == b"/big":
        await resp.write(b"x" * (4 << 20))
    resp.end()


@contextlib.asynccontextmanager
async def serving_pool(protocol: str, timeouts: UpstreamTimeouts) -> AsyncIterator[UpstreamPool]:
    """A pool of ``protocol`` with ``timeouts`` to a fresh loopback worker."""
    server = await start_server(worker, "127.0.0.1", 0)
    cls = H1Pool if protocol == "http1" else H2Pool
    upstream: UpstreamPool = cls("127.0.0.1", server.port, timeouts=timeouts)
    try:
        yield upstream
    finally:
        await upstream.close()
        await server.drain(0.1)


@pytest.fixture(params=["http1", "h2c"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def pool(protocol: str) -> AsyncIterator[UpstreamPool]:
    async with serving_pool(protocol, TIMEOUTS) as upstream:
        yield upstream


async def _drain(response: object) -> bytes:
    return b"".join([c async for c in response.chunks()])  # type: ignore[attr-defined]


async def test_no_head_within_the_first_byte_timeout(pool: UpstreamPool) -> None:
    """A worker that never sends its head: UpstreamTimeout after first_byte_s, not timeout_s."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(UpstreamTimeout):
        await pool.request(b"GET", b"/stall", [], b"", timeout_s=30)
    assert 0.25 <= loop.time() - started < 2.0


async def test_silence_after_the_head_is_the_idle_timeout(pool: UpstreamPool) -> None:
    """Head and a first chunk, then silence: the body ends in UpstreamTimeout after idle_s."""
    loop = asyncio.get_running_loop()
    response = await pool.request(b"GET", b"/head-then-stall", [], b"", timeout_s=30)
    chunks = response.chunks()
    assert await anext(chunks) == b"data: 1\n\n"
    quiet_from = loop.time()
    with pytest.raises(UpstreamTimeout):
        await anext(chunks)
    assert 0.25 <= loop.time() - quiet_from < 2.0


async def test_a_stream_that_keeps_flowing_outlives_both_timeouts(pool: UpstreamPool) -> None:
    """A chunk every 0.1 s for 1 s (over three times both deadlines): it completes."""
    response = await pool.request(b"GET", b"/drip", [], b"", timeout_s=30)
    body = await _drain(response)
    assert body.count(b"data: ") == 10


class _SlowConnectLoop(asyncio.SelectorEventLoop):
    """A loop whose every outgoing connection takes 0.5 s to be made."""

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.5)
        return await super().create_connection(*args, **kwargs)


def test_a_slow_connect_does_not_eat_into_the_first_byte_timeout(protocol: str) -> None:
    """The head is awaited for first_byte_s from the moment the request is written: a connect
    longer than that (0.5 s, first_byte_s 0.3 s), then a prompt answer, is no timeout."""

    async def scenario() -> bytes:
        async with serving_pool(protocol, TIMEOUTS) as upstream:
            response = await upstream.request(b"GET", b"/now", [], b"", timeout_s=30)
            return await _drain(response)

    with asyncio.Runner(loop_factory=_SlowConnectLoop) as runner:
        assert runner.run(scenario()) == b""


async def test_bytes_held_for_a_slow_reader_are_not_the_workers_silence(pool: UpstreamPool) -> None:
    """The worker sent 4 MiB at once; the router's reader takes 1 s before reading: no timeout."""
    response = await pool.request(b"GET", b"/big", [], b"", timeout_s=30)
    await asyncio.sleep(1.0)
    assert len(await _drain(response)) == 4 << 20


async def test_fail_stalled_times_out_only_the_silent_exchanges(protocol: str) -> None:
    """fail_stalled(t) ends the exchanges with nothing from the worker since t (504-bound
    UpstreamTimeout) and leaves one that is receiving bytes."""
    loop = asyncio.get_running_loop()
    async with serving_pool(protocol, UpstreamTimeouts(first_byte_s=30, idle_s=30)) as upstream:
        waiting = asyncio.ensure_future(upstream.request(b"GET", b"/stall", [], b"", timeout_s=30))
        dripping = await upstream.request(b"GET", b"/drip", [], b"", timeout_s=30)
        await asyncio.sleep(0.3)
        assert upstream.fail_stalled(loop.time() - 0.05) == 1
        with pytest.raises(UpstreamTimeout):
            await waiting
        assert (await _drain(dripping)).count(b"data: ") == 10


async def test_fail_stalled_ends_an_exchange_sent_after_t_without_an_answer_head(protocol: str) -> None:
    """An exchange written after t that has no answer head waits on the same hung worker:
    fail_stalled(t) ends it too, instead of leaving it to the first-byte timeout."""
    loop = asyncio.get_running_loop()
    async with serving_pool(protocol, UpstreamTimeouts(first_byte_s=30, idle_s=30)) as upstream:
        since = loop.time()
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(upstream.request(b"GET", b"/stall", [], b"", timeout_s=30))
        await asyncio.sleep(0.3)
        assert upstream.fail_stalled(since) == 1
        with pytest.raises(UpstreamTimeout):
            await waiting


async def test_a_later_exchange_with_an_earlier_deadline_times_out_on_time(protocol: str) -> None:
    """One exchange waits for a head due in 3 s; a later one goes silent after its head with
    0.3 s of idle allowed: the later one times out after ~0.3 s, the earlier one after ~3 s
    (one timer per pool or connection, re-armed for the earlier deadline)."""
    loop = asyncio.get_running_loop()
    async with serving_pool(protocol, UpstreamTimeouts(first_byte_s=3.0, idle_s=0.3)) as upstream:
        started = loop.time()
        waiting = asyncio.ensure_future(upstream.request(b"GET", b"/stall", [], b"", timeout_s=30))
        await asyncio.sleep(0.1)  # its deadline is watched first
        response = await upstream.request(b"GET", b"/head-then-stall", [], b"", timeout_s=30)
        chunks = response.chunks()
        assert await anext(chunks) == b"data: 1\n\n"
        quiet_from = loop.time()
        with pytest.raises(UpstreamTimeout):
            await anext(chunks)
        assert 0.25 <= loop.time() - quiet_from < 1.5
        assert not waiting.done()
        with pytest.raises(UpstreamTimeout):
            await waiting
        assert 2.9 <= loop.time() - started < 6.0
