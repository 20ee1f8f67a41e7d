"""A streamed answer relayed from the upstream connection's callbacks (``relay.StreamRelay``):
what a client and a worker observe when the client is slow, leaves, or the worker dies.

The router's own ``Proxy`` serves a loopback front door (``start_server``); the worker is a
scripted HTTP/1.1 server on loopback; the client speaks raw HTTP/1.1. Each test first sends one
small request so the router holds an idle connection to the worker: the streamed request under
test then takes the callback path (``Forwarder._send`` -> ``Exchange`` -> ``StreamRelay``).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fakes.polling import until
from tests.fakes.relay_case import Http1Case, chunk, post, read_chunked

SSE = b"text/event-stream"
NDJSON = b"application/x-ndjson"


def _stream_head(content_type: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n" % content_type


EVENT = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"  # 64 KiB per event
EVENTS = 512  # 32 MiB in all: far more than the socket buffers and the transport's high water


async def test_a_slow_client_holds_the_worker_back_and_then_gets_everything() -> None:
    """A client that does not read pauses the router's reading from the worker (the worker's
    writes stall well short of the stream), past --upstream-idle-timeout-s (the wait is the
    client's, not the worker's); once the client reads, the whole stream arrives in order."""
    written = 0
    finished = asyncio.Event()

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        writer.write(_stream_head(SSE))
        for i in range(EVENTS):
            writer.write(chunk(b"id: %04d\n" % i + EVENT))
            await writer.drain()
            written += 1
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        finished.set()

    async with Http1Case(streamed, "--upstream-idle-timeout-s", "0.3") as case:
        reader, writer = await case.client()
        writer.write(post(stream=True))
        await asyncio.sleep(1.0)  # the client reads nothing: > 3 idle deadlines
        stalled_at = written
        assert stalled_at < EVENTS // 2, (
            f"the worker wrote {stalled_at} of {EVENTS} events to a stalled client"
        )
        await asyncio.sleep(0.3)
        assert written - stalled_at <= 2  # held, not trickling on
        body, complete = await read_chunked(reader)
        assert complete
        events = body.split(b"\n\n")
        ids = [int(e[4:8]) for e in events if e.startswith(b"id: ")]
        assert ids == list(range(EVENTS))
        assert body.endswith(b"data: [DONE]\n\n")
        await asyncio.wait_for(finished.wait(), 5)
        await until(lambda: case.counts()[:3] == (0, 0, {200: 2}))
        assert case.counts()[3] == {"ok": 2}
        assert not case.worker_conn_closed.is_set()  # the connection went back to the pool
        writer.close()


async def test_a_client_leaving_mid_stream_closes_the_worker_connection_and_frees_everything() -> None:
    """The client closes while events still flow: the router closes its connection to the
    worker (the only way to cancel an h1 exchange), gives back its slot and in-flight count and
    counts 499 / client_gone; the next request is served on a new connection."""
    first_sent = asyncio.Event()

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_stream_head(SSE) + chunk(b"data: 1\n\n"))
        await writer.drain()
        first_sent.set()
        for i in range(600):  # 60 s of events unless the router hangs up
            await asyncio.sleep(0.1)
            writer.write(chunk(b"data: %d\n\n" % i))
            await writer.drain()

    async with Http1Case(streamed, "--max-concurrency", "1", "--queue-size", "0") as case:
        reader, writer = await case.client()
        writer.write(post(stream=True))
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"data: 1" in await reader.readuntil(b"data: 1\n\n")
        writer.close()
        await asyncio.wait_for(case.worker_conn_closed.wait(), 5)
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 499: 1}))
        assert case.counts()[3] == {"ok": 1, "client_gone": 1}
        # The one slot is free: another client is answered, not refused with 429.
        _, other = await case.client()
        other.close()


async def test_a_client_leaving_while_the_worker_is_silent_is_noticed_at_once() -> None:
    """The worker sends one event and then nothing (a long think): a client that closes then
    is seen going at once (not at the next event, which may never come), the worker's
    connection is closed and the slot given back."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_stream_head(SSE) + chunk(b"data: 1\n\n"))
        await writer.drain()
        # No more events: only the router hanging up ends this (read() gives b"" at EOF).
        if await asyncio.wait_for(reader.read(1), 60) == b"":
            raise ConnectionResetError

    async with Http1Case(silent, "--max-concurrency", "1", "--queue-size", "0") as case:
        reader, writer = await case.client()
        writer.write(post(stream=True))
        await reader.readuntil(b"data: 1\n\n")
        writer.close()
        await asyncio.wait_for(case.worker_conn_closed.wait(), 5)
        # (the 200: the warm-up request of ``case.client``)
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 499: 1}))
        assert case.counts()[3] == {"ok": 1, "client_gone": 1}


@pytest.mark.parametrize("content_type", [SSE, NDJSON], ids=["sse", "ndjson"])
async def test_a_worker_dying_mid_stream_is_never_passed_off_as_a_complete_answer(
    content_type: bytes,
) -> None:
    """The worker drops its connection after two events: an SSE stream ends with a final
    upstream_body_incomplete error event (SPEC §5); an NDJSON one is broken off (no last chunk,
    connection closed), never completed. 502 and body_incomplete are counted, nothing is held."""

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = b"data: 1\n\n" if content_type == SSE else b'{"n":1}\n'
        writer.write(_stream_head(content_type) + chunk(line))
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(chunk(line))
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.transport.abort()

    async with Http1Case(streamed) as case:
        reader, writer = await case.client()
        writer.write(post(stream=content_type == SSE))
        body, complete = await asyncio.wait_for(read_chunked(reader), 5)
        if content_type == SSE:
            assert complete
            events = body.strip().split(b"\n\n")
            assert events[:2] == [b"data: 1", b"data: 1"]
            assert events[-1].startswith(b"event: error\ndata: ")
            error = json.loads(events[-1].split(b"data: ", 1)[1])["error"]
            assert error["code"] == "upstream_body_incomplete"
        else:
            assert not complete
            assert body == b'{"n":1}\n{"n":1}\n'
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 502: 1}))
        assert case.counts()[3] == {"ok": 1, "body_incomplete": 1}
        writer.close()


async def test_a_streamed_answer_behind_a_pipelined_one_waits_its_turn() -> None:
    """Two streamed requests pipelined on one client connection, each on its own worker
    connection: the second's events are held back (the worker with them) until the first's
    answer is complete, then follow it; both end with their last chunk."""
    gates = [asyncio.Event(), asyncio.Event()]
    served = 0

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        n = served
        served += 1
        writer.write(_stream_head(SSE) + chunk(b"data: %d-first\n\n" % n))
        await writer.drain()
        await gates[n].wait()
        writer.write(chunk(b"data: %d-last\n\n" % n) + b"0\r\n\r\n")
        await writer.drain()

    async with Http1Case(streamed) as case:
        # Two idle connections to the worker: two clients warm up at once.
        (reader, writer), (_, spare) = await asyncio.gather(case.client(), case.client())
        spare.close()
        await until(lambda: case.counts()[2] == {200: 2})
        writer.write(post(stream=True) + post(stream=True))
        await until(lambda: served == 2)
        gates[1].set()  # the second answer is complete upstream before the first
        await asyncio.sleep(0.2)
        gates[0].set()
        first, first_complete = await asyncio.wait_for(read_chunked(reader), 5)
        second, second_complete = await asyncio.wait_for(read_chunked(reader), 5)
        assert (first, second) == (b"data: 0-first\n\ndata: 0-last\n\n", b"data: 1-first\n\ndata: 1-last\n\n")
        assert first_complete and second_complete
        await until(lambda: case.counts()[:3] == (0, 0, {200: 4}))
        writer.close()


async def test_the_stream_is_counted_to_its_end_and_reaches_an_http10_client_whole() -> None:
    """An HTTP/1.0 client (no chunked coding) gets the events as they come and the connection
    closed after the last one; the request's duration (metrics, access log) runs to the
    stream's end, not to its head."""

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_stream_head(SSE) + chunk(b"data: 0\n\n"))
        await writer.drain()
        for i in (1, 2):
            await asyncio.sleep(0.15)
            writer.write(chunk(b"data: %d\n\n" % i))
            await writer.drain()
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with Http1Case(streamed) as case:
        reader, writer = await case.client()  # (HTTP/1.1 warm-up, then a new HTTP/1.0 client)
        writer.close()
        assert case.front is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", case.front.port)
        writer.write(post(stream=True).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        raw = await asyncio.wait_for(reader.read(), 5)  # to the end of the connection
        head, body = raw.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in head.lower()
        assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
        assert case.router is not None
        stats = case.router.metrics.route("/v1/chat/completions")
        await until(lambda: stats.count == 2)
        assert stats.sum_s >= 0.3  # the warm-up's few ms and the stream's 0.3 s
        writer.close()
