"""HTTP/1.1 (aiohttp) and h2c (``h2``) clients for engine-sim on loopback: one ``Http`` per protocol."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import h2.config
import h2.connection
import h2.events


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    # (arrival time, bytes) of each body chunk, to see streaming happen over time
    chunks: list[tuple[float, bytes]] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def sampling(self) -> dict[str, Any]:
        return dict(json.loads(self.headers["x-sim-sampling-params"]))

    def events(self) -> list[str]:
        """The ``data:`` payloads of an SSE body, in order."""
        return [line[len("data: ") :] for line in self.body.decode().split("\n") if line.startswith("data: ")]


class H2Client:
    """h2c prior knowledge over one connection; requests may run concurrently."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self._streams: dict[int, asyncio.Queue[h2.events.Event | None]] = {}
        self._conn.initiate_connection()
        self._writer.write(self._conn.data_to_send())
        self._pump = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def connect(cls, host: str, port: int) -> H2Client:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for event in self._conn.receive_data(data):
                    sid = getattr(event, "stream_id", None)
                    if isinstance(event, h2.events.DataReceived):
                        self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if sid in self._streams:
                        self._streams[sid].put_nowait(event)
                self._writer.write(self._conn.data_to_send())
        finally:
            for queue in self._streams.values():
                queue.put_nowait(None)

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        sid = self._conn.get_next_available_stream_id()
        queue: asyncio.Queue[h2.events.Event | None] = asyncio.Queue()
        self._streams[sid] = queue
        hdrs = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "sim")]
        hdrs += list((headers or {}).items())
        if body:
            hdrs.append(("content-length", str(len(body))))
        self._conn.send_headers(sid, hdrs, end_stream=not body)
        if body:
            self._conn.send_data(sid, body, end_stream=True)
        self._writer.write(self._conn.data_to_send())
        reply = Reply(0, {}, b"")
        while (event := await queue.get()) is not None:
            if isinstance(event, h2.events.ResponseReceived):
                for k, v in event.headers:
                    key, value = (
                        k.decode() if isinstance(k, bytes) else k,
                        v.decode() if isinstance(v, bytes) else v,
                    )
                    if key == ":status":
                        reply.status = int(value)
                    else:
                        reply.headers[key] = value
            elif isinstance(event, h2.events.DataReceived):
                reply.chunks.append((time.monotonic(), event.data))
                reply.body += event.data
            if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset) or getattr(
                event, "stream_ended", None
            ):
                break
        del self._streams[sid]
        return reply

    async def close(self) -> None:
        self._pump.cancel()
        self._writer.close()


class Http:
    """One client interface over HTTP/1.1 or h2c."""

    def __init__(self, base: str, protocol: str) -> None:
        self.base = base
        self.protocol = protocol
        self._session: aiohttp.ClientSession | None = None
        self._h2: H2Client | None = None

    async def __aenter__(self) -> Http:
        if self.protocol == "h2c":
            host, port = self.base.removeprefix("http://").rsplit(":", 1)
            self._h2 = await H2Client.connect(host, int(port))
        else:
            self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._h2 is not None:
            await self._h2.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        if self._h2 is not None:
            return await self._h2.request(method, path, data, {"content-type": content_type})
        assert self._session is not None
        headers = {"content-type": content_type} if data else None
        async with self._session.request(
            method, self.base + path, data=data or None, headers=headers
        ) as resp:
            reply = Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, b"")
            async for chunk in resp.content.iter_any():
                reply.chunks.append((time.monotonic(), chunk))
                reply.body += chunk
            return reply

    async def post(
        self, path: str, body: Any = None, raw: bytes | None = None, content_type: str = "application/json"
    ) -> Reply:
        return await self.request("POST", path, body, raw, content_type)

    async def get(self, path: str) -> Reply:
        return await self.request("GET", path)
