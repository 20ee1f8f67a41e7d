"""A spliced body (SPEC §3.3) sent by the h2c upstream pool arrives byte for byte: DATA frames cut
across segment boundaries, as the peer's flow-control windows allow (RFC 9113 §5.2)."""

from __future__ import annotations

import asyncio
import hashlib

from dataplane.router.body import SplicedBody
from dataplane.router.upstream.h2c.pool import H2Pool
from tests.fakes.h2c_worker import H2cWorker


class _HashServer(H2cWorker):
    """One h2c connection answering each stream with the sha256 of its body (and its length)."""

    def request_ended(self, stream_id: int, body: bytes) -> None:
        digest = hashlib.sha256(body).hexdigest().encode()
        self.h2.send_headers(stream_id, [(b":status", b"200"), (b"content-length", b"%d" % len(digest))])
        self.h2.send_data(stream_id, digest, end_stream=True)


async def test_spliced_body_arrives_exactly_over_h2c() -> None:
    """A 4 MiB spliced body (far beyond the peer's 64 KiB window) reaches the worker exactly,
    twice over one connection; so does a small one."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_HashServer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = H2Pool("127.0.0.1", port)
    try:
        for size in (4 << 20, 4 << 20, 70_000):
            client = b'{"messages":"' + b"\\u00e9x" * (size // 7) + b'"}'
            view = memoryview(client)
            at = len(client) - 1
            body = SplicedBody((view[:at], b',"top_p":0.95', view[at:]))
            resp = await pool.request(b"POST", b"/v1/chat/completions", [], body, timeout_s=20)
            answer = resp.buffered_body() or b"".join([c async for c in resp.chunks()])
            assert answer == hashlib.sha256(client[:at] + b',"top_p":0.95' + client[at:]).hexdigest().encode()
        assert pool.connections == 1
    finally:
        await pool.close()
        server.close()
