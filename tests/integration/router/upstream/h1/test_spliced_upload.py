"""A spliced body (SPEC §3.3) sent by the HTTP/1.1 upstream pool as segments arrives byte for byte,
with a Content-Length that counts every segment."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from dataplane.router.body import SplicedBody
from dataplane.router.upstream.h1.pool import H1Pool


async def _hash_server() -> asyncio.Server:
    """Answers each request with the sha256 of exactly Content-Length body bytes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                digest = hashlib.sha256(await reader.readexactly(length)).hexdigest().encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(digest), digest))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _spliced(size: int) -> tuple[bytes, SplicedBody]:
    client = b'{"messages":"' + b"\\u00e9x" * (size // 7) + b'"}'
    view = memoryview(client)
    at = len(client) - 1
    return client[:at] + b',"top_p":0.95' + client[at:], SplicedBody((view[:at], b',"top_p":0.95', view[at:]))


@pytest.mark.parametrize("size", [100_000, 4 << 20])
async def test_spliced_body_arrives_exactly(size: int) -> None:
    """Below and above the one-write size, the worker reads exactly the joined bytes."""
    server = await _hash_server()
    port = server.sockets[0].getsockname()[1]
    pool = H1Pool("127.0.0.1", port)
    try:
        expected, body = _spliced(size)
        for _ in range(2):  # the second on the reused connection: framing stayed in step
            resp = await pool.request(b"POST", b"/v1/chat/completions", [], body, timeout_s=20)
            answer = resp.buffered_body() or b"".join([c async for c in resp.chunks()])
            assert answer == hashlib.sha256(expected).hexdigest().encode()
    finally:
        await pool.close()
        server.close()
