"""The router in process behind a loopback front door, with one scripted worker: the harness of
the stream relay tests (``tests/integration/router/path/test_stream_relay*.py``).

``RelayCase`` runs the router's own ``Proxy`` on ``start_server`` and one worker that a subclass
serves (``serve_worker``: an HTTP/1.1 script, or an h2c one); the raw HTTP/1.1 helpers here are
what those tests write and read on the wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from dataplane.http import HttpServer, ServerLimits, start_server
from dataplane.router.app import Router
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.settings import build_parser, settings_from_args

MODEL = "m"
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SMALL_ANSWER = b'{"object":"chat.completion"}'  # what a worker answers the warm-up request


def post(stream: bool, warm_up: bool = False) -> bytes:
    """A chat request as raw HTTP/1.1 bytes; the warm-up asks for one token (``max_tokens`` 1)."""
    fields = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    body = json.dumps({**fields, "max_tokens": 1} if warm_up else fields)
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body.encode())
    )


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (RFC 9112 §7.1)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The body of the next request on a worker's connection (framed by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(h.split(b":")[1]) for h in head.lower().split(b"\r\n") if h.startswith(b"content-length:")
    )
    return await reader.readexactly(length)


async def answer_small(writer: asyncio.StreamWriter) -> None:
    """A worker's whole JSON answer to the warm-up."""
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(SMALL_ANSWER), SMALL_ANSWER)
    )
    await writer.drain()


async def read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """A client's read of a chunked 200 answer: its de-chunked body, and whether the body ended
    with its last chunk (False: the connection closed before it)."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower()
    body = b""
    try:
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return body, True
            body += (await reader.readexactly(size + 2))[:-2]
    except (asyncio.IncompleteReadError, ConnectionError):
        return body, False


class RelayCase:
    """The router in process (flags as on its command line), its front door, one worker."""

    def __init__(self, *flags: str, limits: ServerLimits | None = None) -> None:
        self.flags = flags
        self.limits = limits
        self.worker_conn_closed = asyncio.Event()  # the router closed its connection to the worker
        self.router: Router | None = None
        self.front: HttpServer | None = None
        self.worker: asyncio.Server | None = None

    async def serve_worker(self) -> tuple[asyncio.Server, str, str]:
        """Start the worker on loopback: its server, URL and protocol ("http1" or "h2c")."""
        raise NotImplementedError

    async def __aenter__(self) -> RelayCase:
        self.worker, url, protocol = await self.serve_worker()
        args = ["--listen", "127.0.0.1:0", "--worker", url, *self.flags]
        self.router = Router(settings_from_args(build_parser().parse_args(args)))
        self.router.state.apply_workers([WorkerSpec(url, protocol, (MODEL,))])
        self.front = await start_server(self.router.proxy.handle, "127.0.0.1", 0, limits=self.limits)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.router is not None and self.front is not None and self.worker is not None
        await self.front.drain(0.1)
        for worker in self.router.state.workers.workers:
            await worker.pool.close()
        self.worker.close()

    async def client(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An HTTP/1.1 client connection whose warm-up request left the router a connection to
        the worker (one the worker has spoken on): the next request takes the callback path."""
        assert self.front is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", self.front.port)
        writer.write(post(stream=False, warm_up=True))
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.startswith(b"content-length:"))
        await reader.readexactly(length)
        return reader, writer

    def counts(self) -> tuple[int, int, dict[int, int], dict[str, int]]:
        """Slots in use, the worker's in-flight count, the route's statuses, the upstream outcomes."""
        assert self.router is not None
        metrics = self.router.metrics
        stats = metrics.route("/v1/chat/completions")
        outcomes = {key[2]: n for key, n in metrics.upstream.items()}
        return (
            self.router.admission.in_use,
            self.router.state.workers.workers[0].inflight,
            dict(stats.by_status),
            outcomes,
        )


def is_warm_up(fields: dict[str, Any]) -> bool:
    """The warm-up request of ``RelayCase.client`` (``max_tokens`` 1)."""
    return bool(fields.get("max_tokens") == 1)


class Http1Case(RelayCase):
    """The router and a scripted HTTP/1.1 worker: a request ``small`` picks (by its JSON fields;
    the warm-up by default) gets a small JSON answer, every other one runs ``streamed`` on the
    worker's connection."""

    def __init__(
        self,
        streamed: Script,
        *flags: str,
        limits: ServerLimits | None = None,
        small: Callable[[dict[str, Any]], bool] = is_warm_up,
    ) -> None:
        super().__init__(*flags, limits=limits)
        self.streamed = streamed
        self.small = small

    async def serve_worker(self) -> tuple[asyncio.Server, str, str]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    if self.small(json.loads(await read_request(reader))):
                        await answer_small(writer)
                    else:
                        await self.streamed(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                self.worker_conn_closed.set()
            except asyncio.CancelledError:
                pass  # the test's loop closing: the script's own end
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", "http1"
