"""The floor of a Python HTTP/1.1 router: a featureless uvloop + httptools hop to a worker.

    python bench/floor_proxy.py --listen 127.0.0.1:0 --worker http://127.0.0.1:PORT [--worker URL ...]

Each client connection gets one upstream connection of its own (opened on its first request,
kept alive), to the workers in turn when there are several (fixed for the connection: no routing
per request); a request is parsed with httptools and written upstream as received (head and
body); the worker's answer bytes are written to the client as they arrive, the response parser
only telling where an answer ends. No routing, no contract, no metrics, no limits, no logging:
what any Python proxy on this stack pays at least per request (``bench/router_floor.py``
divides every router's CPU per request by this one's). Not a product part: benchmark only.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from urllib.parse import urlsplit

import httptools
import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        client = self.client.transport
        if client is not None:
            client.write(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client.exchange_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.client.transport is not None:
            self.client.transport.close()


class _Client(asyncio.Protocol):
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.upstream: _Upstream | None = None
        self.parts: list[bytes] = []
        self.pending: list[bytes] = []
        self.connecting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.parts = []

    def on_url(self, url: bytes) -> None:
        self.parts.append(self.parser.get_method() + b" " + url + b" HTTP/1.1\r\n")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.parts.append(name + b": " + value + b"\r\n")

    def on_headers_complete(self) -> None:
        self.parts.append(b"\r\n")

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        request = b"".join(self.parts)
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.write(request)
            return
        self.pending.append(request)
        if not self.connecting:
            self.connecting = True
            asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(lambda: _Upstream(self), self.host, self.port)
        self.upstream = upstream
        assert upstream.transport is not None
        upstream.transport.write(b"".join(self.pending))
        self.pending.clear()

    def exchange_done(self) -> None:
        pass  # keep-alive on both sides: nothing to do between exchanges

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def serve(listen: str, workers: list[str]) -> None:
    host, _, port = listen.rpartition(":")
    addresses = []
    for worker in workers:
        target = urlsplit(worker)
        assert target.hostname is not None and target.port is not None
        addresses.append((target.hostname, target.port))
    turn = itertools.cycle(addresses)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(*next(turn)), host, int(port))
    bound = server.sockets[0].getsockname()
    print(f"floor listening on http://{bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--worker", required=True, action="append", help="http://HOST:PORT (repeatable)")
    args = parser.parse_args()
    uvloop.run(serve(args.listen, args.worker))


if __name__ == "__main__":
    main()
