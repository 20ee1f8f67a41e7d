"""A streamed answer relayed from the upstream connection's callbacks (``relay.StreamRelay``) to
an h2c client (RFC 9113 §3.3 prior knowledge): what the client and the worker observe when the
client gives no flow-control credit (RFC 9113 §5.2), resets the stream, or reads along.

The router's own ``Proxy`` serves a loopback front door (``start_server``); the worker is a
scripted HTTP/1.1 server on loopback; the client is the ``h2`` library over asyncio streams. A
small request first leaves an idle connection to the worker, so the streamed request under
test takes the callback path (``Forwarder._send`` -> ``Exchange`` -> ``StreamRelay``).
"""

from __future__ import annotations

import asyncio
import json

import h2.config
import h2.connection
import h2.events
import h2.settings

from tests.fakes.polling import until
from tests.fakes.relay_case import MODEL, Http1Case, Script, chunk

EVENT = b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n"  # 64 KiB per event
EVENTS = 512  # 32 MiB: far more than the socket buffers, the windows and the stream buffer


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Case(Http1Case):
    """The router and a scripted HTTP/1.1 worker: ``streamed`` answers every streamed request,
    the others (the warm-up) get a small JSON answer."""

    def __init__(self, streamed: Script, *flags: str) -> None:
        super().__init__(streamed, *flags, small=lambda fields: not fields.get("stream"))


class Client:
    """An h2c client whose credit the test controls: nothing is acknowledged unless ``ack``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535}
        )
        self.conn.initiate_connection()
        self.status: dict[int, int] = {}
        self.body: dict[int, bytearray] = {}
        self.ended: set[int] = set()
        self.unacked: dict[int, int] = {}

    @classmethod
    async def open(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.flush()
        return client

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    def post(self, stream: bool) -> int:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream})
        sid = self.conn.get_next_available_stream_id()
        fields = [
            (b":method", b"POST"),
            (b":path", b"/v1/chat/completions"),
            (b":scheme", b"http"),
            (b":authority", b"r"),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
        ]
        self.conn.send_headers(sid, fields)
        self.conn.send_data(sid, body.encode(), end_stream=True)
        self.status[sid], self.body[sid] = 0, bytearray()
        self.flush()
        return sid

    async def read(self, ack: bool) -> None:
        """One read from the socket, its events recorded; credit returned if ``ack``."""
        data = await self.reader.read(1 << 20)
        assert data, "the router closed the connection"
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self.status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                self.body[event.stream_id] += event.data
                self.unacked[event.stream_id] = (
                    self.unacked.get(event.stream_id, 0) + event.flow_controlled_length
                )
            elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                self.ended.add(event.stream_id)
        if ack:
            self.ack()
        self.flush()

    def ack(self) -> None:
        for sid, n in self.unacked.items():
            if n:
                self.conn.acknowledge_received_data(n, sid)
        self.unacked.clear()

    async def until_ended(self, sid: int, ack: bool = True) -> None:
        async with asyncio.timeout(10):
            while sid not in self.ended:
                await self.read(ack)


async def _warm(case: Case) -> Client:
    """A client whose first (small) answer left an idle connection to the worker."""
    assert case.front is not None
    client = await Client.open(case.front.port)
    sid = client.post(stream=False)
    await client.until_ended(sid)
    assert client.status[sid] == 200
    return client


async def test_an_h2c_client_gets_the_events_as_they_come_and_the_request_is_counted() -> None:
    """Each event reaches the h2c client while the worker is still streaming; the stream ends,
    and slot, in-flight count and metrics are given back as for an HTTP/1.1 client."""
    gate = asyncio.Event()

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        await gate.wait()
        writer.write(chunk(b"data: 2\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with Case(streamed) as case:
        client = await _warm(case)
        sid = client.post(stream=True)
        async with asyncio.timeout(5):
            while bytes(client.body[sid]) != b"data: 1\n\n":
                await client.read(ack=True)
        assert client.status[sid] == 200 and sid not in client.ended
        gate.set()
        await client.until_ended(sid)
        assert bytes(client.body[sid]) == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
        await until(lambda: case.counts()[:3] == (0, 0, {200: 2}))
        assert case.counts()[3] == {"ok": 2}
        assert not case.worker_conn_closed.is_set()
        client.writer.close()


async def test_an_h2c_client_giving_no_credit_holds_the_worker_back_and_then_gets_everything() -> None:
    """A client that returns no flow-control credit (RFC 9113 §5.2) gets one window of the
    stream; the router queues at most its stream buffer more and stops reading from the worker
    (whose writes stall far short of the stream), past --upstream-idle-timeout-s (the wait is
    the client's, not the worker's); once the client gives credit, every event arrives in order."""
    written = 0

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        writer.write(STREAM_HEAD)
        for i in range(EVENTS):
            writer.write(chunk(b"id: %04d\n" % i + EVENT))
            await writer.drain()
            written += 1
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with Case(streamed, "--upstream-idle-timeout-s", "0.3") as case:
        client = await _warm(case)
        sid = client.post(stream=True)
        async with asyncio.timeout(5):
            while len(client.body[sid]) < 65000:  # (about) one window's worth, then no more credit
                await client.read(ack=False)
        await asyncio.sleep(1.0)
        stalled_at = written
        assert stalled_at < EVENTS // 2, f"the worker wrote {stalled_at} of {EVENTS} events"
        try:
            async with asyncio.timeout(0.2):
                while True:
                    await client.read(ack=False)
        except TimeoutError:
            pass
        assert len(client.body[sid]) <= 65535  # nothing past the window
        await asyncio.sleep(0.3)
        assert written - stalled_at <= 2  # held, not trickling on
        client.ack()
        client.flush()
        await client.until_ended(sid)
        body = bytes(client.body[sid])
        ids = [int(e[4:8]) for e in body.split(b"\n\n") if e.startswith(b"id: ")]
        assert ids == list(range(EVENTS))
        assert body.endswith(b"data: [DONE]\n\n")
        await until(lambda: case.counts()[:3] == (0, 0, {200: 2}))
        assert not case.worker_conn_closed.is_set()
        client.writer.close()


async def test_an_h2c_client_resetting_the_stream_closes_the_worker_connection() -> None:
    """RST_STREAM(CANCEL) mid-stream: the router closes its connection to the worker, gives
    back slot and in-flight count and counts 499 / client_gone; the client's connection stays
    usable for the next request."""
    first_sent = asyncio.Event()

    async def streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(STREAM_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        first_sent.set()
        for i in range(600):  # 60 s of events unless the router hangs up
            await asyncio.sleep(0.1)
            writer.write(chunk(b"data: %d\n\n" % i))
            await writer.drain()

    async with Case(streamed) as case:
        client = await _warm(case)
        sid = client.post(stream=True)
        async with asyncio.timeout(5):
            while not client.body[sid]:
                await client.read(ack=True)
        client.conn.reset_stream(sid, 8)  # CANCEL
        client.flush()
        await asyncio.wait_for(case.worker_conn_closed.wait(), 5)
        await until(lambda: case.counts()[:3] == (0, 0, {200: 1, 499: 1}))
        assert case.counts()[3] == {"ok": 1, "client_gone": 1}
        again = client.post(stream=False)
        await client.until_ended(again)
        assert client.status[again] == 200
        client.writer.close()
