"""A scriptable h2c server on loopback, to drive the h2c upstream through every failure mode.

The path picks the behaviour (engine-sim covers the happy paths; this covers what a real engine
does rarely: refusals, resets, GOAWAY, dying mid-answer, never answering):

  /echo               200, body = the number of request body bytes received (after END_STREAM)
  /whole              200 "whole": HEADERS and DATA(END_STREAM) in one write
  /stream?n=K&ms=D    200, K chunks ``chunk-i\\n`` D ms apart
  /big?bytes=N        200, N bytes sent as the flow-control windows allow
  /refuse             RST_STREAM(REFUSED_STREAM) before any answer (every time)
  /reset              headers, one chunk, then RST_STREAM(INTERNAL_ERROR)
  /goaway             GOAWAY(NO_ERROR, last_stream_id = previous stream), no answer on this one
                      (as a connection's first stream: 200 "fresh")
  /die                headers, one chunk, then the TCP connection is closed
  /hang               never answers
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

import h2.config
import h2.connection
import h2.events
from h2.connection import ConnectionState
from h2.errors import ErrorCodes


class ScriptedH2Server(asyncio.Protocol):
    """One server-side h2c connection."""

    def __init__(self, owner: ScriptedServer) -> None:
        self.owner = owner
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.transport: asyncio.Transport | None = None
        self.bodies: dict[int, int] = {}
        self.held: dict[int, int] = {}
        self.paths: dict[int, bytes] = {}
        self.window_changed = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.owner.connections.append(self)
        self.h2.initiate_connection()
        self.flush()

    def connection_lost(self, exc: BaseException | None) -> None:
        for task in self.tasks:
            task.cancel()

    def flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                sid = event.stream_id
                self.paths[sid] = dict(event.headers)[b":path"]  # type: ignore[arg-type]
                self.bodies[sid] = 0
                self.owner.requests += 1
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += len(event.data)  # type: ignore[arg-type]
                size: int = event.flow_controlled_length  # type: ignore[assignment]
                if self.owner.hold_uploads:
                    # Connection credit back at once, stream credit withheld: only this
                    # stream's upload stalls (RFC 9113 §5.2).
                    self.h2.increment_flow_control_window(size)
                    self.held[event.stream_id] = self.held.get(event.stream_id, 0) + size  # type: ignore[index]
                else:
                    self.h2.acknowledge_received_data(size, event.stream_id)  # type: ignore[arg-type]
            elif isinstance(event, h2.events.StreamEnded):
                self.spawn(self.answer(event.stream_id))  # type: ignore[arg-type]
            elif isinstance(event, h2.events.StreamReset):
                self.owner.resets.append(event.error_code)  # type: ignore[arg-type]
            elif isinstance(event, h2.events.WindowUpdated):
                self.window_changed.set()
        self.flush()

    def spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def respond(self, sid: int, end: bool = False) -> None:
        self.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/plain")], end_stream=end)
        self.flush()

    async def send(self, sid: int, data: bytes, end: bool) -> None:
        view = memoryview(data)
        while view:
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.window_changed.clear()
                await self.window_changed.wait()
                continue
            self.h2.send_data(sid, view[:window])
            view = view[window:]
            self.flush()
            await asyncio.sleep(0)
        if end:
            self.h2.end_stream(sid)
            self.flush()

    async def answer(self, sid: int) -> None:
        url = urlsplit(self.paths[sid].decode())
        q = {k: int(v[0]) for k, v in parse_qs(url.query).items()}
        path = url.path
        if path == "/echo":
            self.respond(sid)
            await self.send(sid, str(self.bodies[sid]).encode(), True)
        elif path == "/whole":
            self.h2.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/plain")])
            self.h2.send_data(sid, b"whole", end_stream=True)
            self.flush()
        elif path == "/stream":
            self.respond(sid)
            for i in range(q.get("n", 3)):
                await asyncio.sleep(q.get("ms", 10) / 1000)
                await self.send(sid, f"chunk-{i}\n".encode(), False)
            self.h2.end_stream(sid)
            self.flush()
        elif path == "/big":
            self.respond(sid)
            await self.send(sid, b"x" * q["bytes"], True)
        elif path == "/refuse":
            self.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            self.flush()
        elif path == "/reset":
            self.respond(sid)
            await self.send(sid, b"partial", False)
            self.h2.reset_stream(sid, ErrorCodes.INTERNAL_ERROR)
            self.flush()
        elif path == "/goaway" and sid == 1:
            # First stream of a connection: nothing to refuse, answer normally.
            self.respond(sid)
            await self.send(sid, b"fresh", True)
        elif path == "/goaway":
            self.h2.close_connection(ErrorCodes.NO_ERROR, last_stream_id=sid - 2)
            self.flush()
            # Graceful GOAWAY (RFC 9113 §6.8): h2 closes its state machine; keep serving the
            # streams at or below last_stream_id like a real server does.
            self.h2.state_machine.state = ConnectionState.SERVER_OPEN
        elif path == "/die":
            self.respond(sid)
            await self.send(sid, b"partial", False)
            await asyncio.sleep(0.01)
            assert self.transport is not None
            self.transport.close()
        elif path == "/hang":
            await asyncio.sleep(3600)


class ScriptedServer:
    """The listening side: counts requests and resets across connections."""

    def __init__(self) -> None:
        self.connections: list[ScriptedH2Server] = []
        self.requests = 0
        self.resets: list[int] = []
        self.hold_uploads = False
        self.port = 0
        self.server: asyncio.Server | None = None

    def release_uploads(self) -> None:
        """Return every withheld upload credit."""
        self.hold_uploads = False
        for conn in self.connections:
            for sid, held in conn.held.items():
                if sid in conn.h2.streams:
                    conn.h2.increment_flow_control_window(held, sid)
            conn.held.clear()
            conn.flush()
