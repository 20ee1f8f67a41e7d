"""Test doubles for the load tests: scripted HTTP/1.1 and h2c-only JSON servers, raw PUB sockets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import zmq
from aiohttp import web

from controlplane.load.wire import LoadStat, encode_frame

# path -> list of (status, json body) answered in order; the last one repeats.
Script = dict[str, list[tuple[int, Any]]]


class JsonServer:
    """An HTTP/1.1 (aiohttp) or h2c-prior-knowledge-only (h2) server answering scripted JSON."""

    def __init__(self, script: Script, *, h2c: bool = False) -> None:
        self.script = script
        self.h2c = h2c
        self.hits: dict[str, int] = {}
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    def _answer(self, path: str) -> tuple[int, bytes]:
        n = self.hits.get(path, 0)
        self.hits[path] = n + 1
        answers = self.script.get(path)
        if not answers:
            return 404, b'{"error": "not found"}'
        status, body = answers[min(n, len(answers) - 1)]
        return status, body if isinstance(body, bytes) else json.dumps(body).encode()

    async def __aenter__(self) -> JsonServer:
        if self.h2c:
            self._server = await asyncio.start_server(self._h2c_conn, "127.0.0.1", 0)
            port = self._server.sockets[0].getsockname()[1]
        else:
            app = web.Application()
            app.router.add_get("/{tail:.*}", self._h1)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _h1(self, request: web.Request) -> web.Response:
        status, body = self._answer(request.path)
        return web.Response(status=status, body=body, content_type="application/json")

    async def _h2c_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        try:
            while data := await reader.read(65536):
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    writer.write(conn.data_to_send())
                    break
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        path = dict(event.headers)[":path"]
                        status, body = self._answer(path)
                        conn.send_headers(
                            event.stream_id, [(":status", str(status)), ("content-type", "application/json")]
                        )
                        conn.send_data(event.stream_id, body, end_stream=True)
                writer.write(conn.data_to_send())
                await writer.drain()
        finally:
            writer.close()


class Pub:
    """A raw PUB socket bound on a free loopback port, sending frames with a running seq."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        endpoint: str = "tcp://127.0.0.1:*",
        *,
        heartbeat_ms: int = 0,
    ) -> None:
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if heartbeat_ms:  # ZMTP PINGs; the peer is dropped after 3 intervals without a PONG
            self.sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
            self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * heartbeat_ms)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.seq = 0

    def send(self, stat: LoadStat, seq: int | None = None) -> None:
        if seq is not None:
            self.seq = seq
        self.sock.send_multipart(encode_frame(self.seq, stat))
        self.seq += 1

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def close(self) -> None:
        self.sock.close(linger=0)


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def until_async(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    """Poll the coroutine ``check`` until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)
