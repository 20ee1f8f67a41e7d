"""The shared HTTP server (``dataplane.http``) on 127.0.0.1:0 and raw clients for it: HTTP/1.1 over
asyncio streams, h2c on the ``h2`` library."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httptools

from dataplane.http import HttpServer, ServerLimits, start_server
from dataplane.http.request import Handler


@contextlib.asynccontextmanager
async def serving(handler: Handler, **limits: Any) -> AsyncIterator[HttpServer]:
    """A server on 127.0.0.1:0 for the duration of the block; connections killed after it."""
    server = await start_server(handler, "127.0.0.1", 0, limits=ServerLimits(**limits))
    try:
        yield server
    finally:
        await server.drain(0.5)


@dataclass
class H1Response:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    chunks: list[tuple[float, bytes]] = field(default_factory=list)  # (arrival time, data)
    complete: bool = False

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class H1Reader:
    """Parses HTTP/1.1 answers from a stream, in order, with arrival times of body pieces."""

    def __init__(self, reader: asyncio.StreamReader, head_request: bool = False) -> None:
        self.reader = reader
        self.done: list[H1Response] = []
        self._cur = H1Response()
        self._parser = httptools.HttpResponseParser(self)
        self.eof = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._cur.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._cur.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._cur.body += body
        self._cur.chunks.append((asyncio.get_running_loop().time(), body))

    def on_message_complete(self) -> None:
        self._cur.complete = True
        self.done.append(self._cur)
        self._cur = H1Response()

    async def read(self, wait_s: float = 5.0) -> H1Response:
        """The next complete answer (raises on EOF before it)."""
        async with asyncio.timeout(wait_s):
            while not self.done:
                data = await self.reader.read(65536)
                if not data:
                    self.eof = True
                    with contextlib.suppress(httptools.HttpParserError):
                        self._parser.feed_data(b"")
                    if not self.done:
                        raise ConnectionError("EOF before a complete answer")
                    break
                self._parser.feed_data(data)
        return self.done.pop(0)

    async def at_eof(self, wait_s: float = 5.0) -> bool:
        """True if the server closes the connection (without sending more) within ``wait_s``."""
        async with asyncio.timeout(wait_s):
            try:
                data = await self.reader.read(65536)
            except ConnectionResetError:
                return True
        return data == b""


async def h1_open(port: int) -> tuple[H1Reader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return H1Reader(reader), writer


def get(path: str = "/", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: t\r\n{extra}\r\n".encode()


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


@dataclass
class H2Stream:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reset: int | None = None

    @property
    def status(self) -> int:
        return int(dict(self.headers)[b":status"])


class H2Client:
    """A prior-knowledge h2c client; streams listed in ``no_ack`` never return flow-control credit."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.streams: dict[int, H2Stream] = {}
        self.no_ack: set[int] = set()
        self.unacked: dict[int, int] = {}
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.settings_acked = asyncio.Event()
        self.closed = asyncio.Event()
        self._reader_task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, port: int, *, conn_window: int = 64 * 1024 * 1024) -> H2Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.conn.initiate_connection()
        # A large connection window so one unread stream cannot stall the others at our side.
        client.conn.increment_flow_control_window(conn_window)
        client.flush()
        client._reader_task = asyncio.create_task(client._read_loop())
        await asyncio.wait_for(client.settings_acked.wait(), 5)
        return client

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def request(
        self,
        method: bytes,
        path: bytes,
        body: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        end: bool = True,
    ) -> int:
        sid: int = self.conn.get_next_available_stream_id()
        hdrs = [(b":method", method), (b":path", path), (b":scheme", b"http"), (b":authority", b"t")]
        hdrs += headers or []
        self.streams[sid] = H2Stream()
        self.conn.send_headers(sid, hdrs, end_stream=end and not body)
        if body:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    async def send_body(self, sid: int, body: bytes, end: bool = True) -> None:
        """Send ``body`` respecting the server's windows (waits for WINDOW_UPDATE)."""
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                await asyncio.sleep(0.005)
                continue
            n = min(window, len(view))
            self.conn.send_data(sid, bytes(view[:n]), end_stream=end and n == len(view))
            view = view[n:]
            self.flush()
            await self.writer.drain()
        if end and not body:
            self.conn.end_stream(sid)
            self.flush()

    def ack(self, sid: int) -> None:
        """Return the credit held back on a ``no_ack`` stream."""
        self.no_ack.discard(sid)
        n = self.unacked.pop(sid, 0)
        if n:
            self.conn.acknowledge_received_data(n, sid)
            self.flush()

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for ev in self.conn.receive_data(data):
                    self._on_event(ev)
                self.flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed.set()
            for st in self.streams.values():
                st.ended.set()

    def _on_event(self, ev: h2.events.Event) -> None:
        now = asyncio.get_running_loop().time()
        if isinstance(ev, h2.events.ResponseReceived):
            self.streams[ev.stream_id].headers = list(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            st = self.streams[ev.stream_id]
            st.body += ev.data
            st.chunks.append((now, ev.data))
            if ev.stream_id in self.no_ack:
                # Connection credit is returned, stream credit is not: a stalled reader.
                self.unacked[ev.stream_id] = self.unacked.get(ev.stream_id, 0) + ev.flow_controlled_length
                self.conn.increment_flow_control_window(ev.flow_controlled_length)
            else:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            self.streams[ev.stream_id].ended.set()
        elif isinstance(ev, h2.events.StreamReset):
            st = self.streams.get(ev.stream_id)
            if st is not None:
                st.reset = ev.error_code
                st.ended.set()
        elif isinstance(ev, h2.events.SettingsAcknowledged):
            self.settings_acked.set()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.terminated = ev
            if ev.error_code == 0:
                # python-h2 treats every GOAWAY as terminal, but RFC 9113 §6.8 lets the streams up to
                # last_stream_id finish: reopen the state machine to observe them as real clients do.
                self.conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN

    async def response(self, sid: int, wait_s: float = 5.0) -> H2Stream:
        st = self.streams[sid]
        await asyncio.wait_for(st.ended.wait(), wait_s)
        return st

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
