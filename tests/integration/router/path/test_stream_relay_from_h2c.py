"""A streamed answer of an h2c worker (RFC 9113 §3.3 prior knowledge, SGLang's
``--enable-http2``) relayed from the upstream connection's callbacks (``relay.StreamRelay`` fed
by ``H2Stream.relay_to``): what an HTTP/1.1 client and the worker observe when the client is
slow, leaves, or the worker fails mid-stream.

The router's own ``Proxy`` serves a loopback front door (``start_server``); the worker is a
scripted h2c server on loopback (the ``h2`` library, sending only as its flow-control windows
allow); the client speaks raw HTTP/1.1. Each test first sends one small request so the router
holds a connection the worker has spoken on: the streamed request under test then takes the
callback path (``H2Pool.start`` -> ``Exchange`` -> ``StreamRelay``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import h2.events
import pytest
from h2.errors import ErrorCodes

from tests.fakes.h2c_worker import H2cWorker
from tests.fakes.polling import until
from tests.fakes.relay_case import SMALL_ANSWER, RelayCase, post, read_chunked

SSE = b"text/event-stream"
NDJSON = b"application/x-ndjson"
EVENT = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"  # 64 KiB per event
EVENTS = 512  # 32 MiB: far more than the socket buffers, the stream window and the high water


class Worker(H2cWorker):
    """One h2c connection of the scripted worker; ``Case.streamed`` answers each streamed request."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.case = case
        self.window = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.case.worker_conn_closed.set()
        for task in self.tasks:
            task.cancel()

    def request_ended(self, stream_id: int, body: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self.answer(stream_id, body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.StreamReset):
            self.case.resets.append((event.stream_id, event.error_code))  # type: ignore[arg-type]
            self.window.set()
        elif isinstance(event, h2.events.WindowUpdated):
            self.window.set()

    async def answer(self, sid: int, body: bytes) -> None:
        if json.loads(body).get("max_tokens") == 1:  # the warm-up
            self.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/json")])
            self.h2.send_data(sid, SMALL_ANSWER, end_stream=True)
            self.flush()
            return
        await self.case.streamed(self, sid)

    def head(self, sid: int, content_type: bytes = SSE) -> None:
        self.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", content_type)])
        self.flush()

    async def send(self, sid: int, data: bytes, end: bool = False) -> None:
        """``data`` on stream ``sid`` as the router's windows allow (RFC 9113 §5.2)."""
        view = memoryview(data)
        while view:
            if sid not in self.h2.streams:
                raise ConnectionResetError("the router reset the stream")
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.window.clear()
                await self.window.wait()
                continue
            self.h2.send_data(sid, bytes(view[:window]))
            view = view[window:]
            self.flush()
            await asyncio.sleep(0)
        if end:
            self.h2.end_stream(sid)
            self.flush()


Script = Callable[[Worker, int], Awaitable[None]]


class Case(RelayCase):
    """The router and the scripted h2c worker; ``streamed`` answers each streamed request."""

    def __init__(self, streamed: Script, *flags: str) -> None:
        super().__init__(*flags)
        self.streamed = streamed
        self.resets: list[tuple[int, int]] = []  # RST_STREAMs the worker received

    async def serve_worker(self) -> tuple[asyncio.Server, str, str]:
        server = await asyncio.get_running_loop().create_server(lambda: Worker(self), "127.0.0.1", 0)
        return server, f"h2c://127.0.0.1:{server.sockets[0].getsockname()[1]}", "h2c"


async def test_a_slow_client_holds_the_h2c_worker_back_and_then_gets_everything() -> None:
    """A client that does not read: the router returns no more credit on the stream, so the
    worker's sending stalls well short of the stream (RFC 9113 §5.2), past
    --upstream-idle-timeout-s (the wait is the client's, not the worker's); once the client
    reads, the whole stream arrives in order and the worker's connection stays up."""
    written = 0
    finished = asyncio.Event()

    async def streamed(worker: Worker, sid: int) -> None:
        nonlocal written
        worker.head(sid)
        for i in range(EVENTS):
            await worker.send(sid, b"id: %04d\n" % i + EVENT)
            written += 1
        await worker.send(sid, b"data: [DONE]\n\n", end=True)
        finished.set()

    async with Case(streamed, "--upstream-idle-timeout-s", "0.3") as case:
        reader, writer = await case.client()
        writer.write(post(stream=True))
        await asyncio.sleep(1.0)  # the client reads nothing: > 3 idle deadlines
        stalled_at = written
        assert stalled_at < EVENTS // 2, (
            f"the worker sent {stalled_at} of {EVENTS} events to a stalled client"
        )
        await asyncio.sleep(0.3)
        assert written - stalled_at <= 2  # held, not trickling on
        body, complete = await read_chunked(reader)
        assert complete
        ids = [int(e[4:8]) for e in body.split(b"\n\n") if e.startswith(b"id: ")]
        assert ids == list(range(EVENTS))
        assert body.endswith(b"data: [DONE]\n\n")
        await asyncio.wait_for(finished.wait(), 5)
        await until(lambda: case.counts()[:3] == (0, 0, {200: 2}))
        assert case.counts()[3] == {"ok": 2}
        assert case.resets == []
        assert not case.worker_conn_closed.is_set()
        writer.close()


async def test_a_client_leaving_mid_stream_resets_the_stream_and_frees_everything_once() -> None:
    """The client closes while events still flow: the worker gets RST_STREAM(CANCEL) on that
    stream alone (its connection stays up), the slot and in-flight count are given back once and
    499 / client_gone counted; the one slot serves the next client."""
    first_sent = asyncio.Event()

    async def streamed(worker: Worker, sid: int) -> None:
        worker.head(sid)
        await worker.send(sid, b"data: 1\n\n")
        first_sent.set()
        for i in range(600):  # 60 s of events unless the router resets the stream
            await asyncio.sleep(0.1)
            await worker.send(sid, b"data: %d\n\n" % i)

    async with Case(streamed, "--max-concurrency", "1", "--queue-size", "0") as case:
        reader, writer = await case.client()
        writer.write(post(stream=True))
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        await reader.readuntil(b"data: 1\n\n")
        writer.close()
        await until(lambda: bool(case.resets))
        assert case.resets == [(3, ErrorCodes.CANCEL)]  # stream 1 was the warm-up
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 499: 1}))
        assert case.counts()[3] == {"ok": 1, "client_gone": 1}
        _, other = await case.client()  # the one slot is free: answered, not refused with 429
        other.close()
        assert not case.worker_conn_closed.is_set()
        await asyncio.sleep(0.2)
        assert case.counts()[:3] == (0, 0, {200: 2, 499: 1})  # counted once


@pytest.mark.parametrize(
    ("content_type", "how"),
    [(SSE, "reset"), (SSE, "die"), (NDJSON, "reset")],
    ids=["sse-reset", "sse-connection-lost", "ndjson-reset"],
)
async def test_a_worker_failing_mid_stream_is_never_passed_off_as_a_complete_answer(
    content_type: bytes, how: str
) -> None:
    """The worker resets the stream (RST_STREAM INTERNAL_ERROR) or drops its connection after
    two events: an SSE stream ends with a final upstream_body_incomplete error event (SPEC §5);
    an NDJSON one is broken off, never completed. 502 and body_incomplete are counted, nothing
    is held."""

    async def streamed(worker: Worker, sid: int) -> None:
        line = b"data: 1\n\n" if content_type == SSE else b'{"n":1}\n'
        worker.head(sid, content_type)
        await worker.send(sid, line)
        await asyncio.sleep(0.1)
        await worker.send(sid, line)
        await asyncio.sleep(0.1)
        if how == "reset":
            worker.h2.reset_stream(sid, ErrorCodes.INTERNAL_ERROR)
            worker.flush()
        else:
            assert worker.transport is not None
            worker.transport.abort()

    async with Case(streamed) as case:
        reader, writer = await case.client()
        writer.write(post(stream=content_type == SSE))
        body, complete = await asyncio.wait_for(read_chunked(reader), 5)
        if content_type == SSE:
            assert complete
            events = body.strip().split(b"\n\n")
            assert events[:2] == [b"data: 1", b"data: 1"]
            assert len(events) == 3
            assert events[-1].startswith(b"event: error\ndata: ")
            error = json.loads(events[-1].split(b"data: ", 1)[1])["error"]
            assert error["code"] == "upstream_body_incomplete"
        else:
            assert not complete
            assert body == b'{"n":1}\n{"n":1}\n'
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 502: 1}))
        assert case.counts()[3] == {"ok": 1, "body_incomplete": 1}
        writer.close()
