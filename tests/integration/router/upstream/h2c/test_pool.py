"""The h2c upstream pool against a scripted h2c server on loopback (SPEC §1, §5; RFC 9113)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from h2.errors import ErrorCodes

from dataplane.errors import UpstreamBodyIncomplete, UpstreamTimeout, UpstreamUnreachable
from dataplane.router.upstream.h2c.pool import H2Pool
from tests.fakes.scripted_h2c import ScriptedServer


async def _get(pool: H2Pool, path: bytes, body: bytes = b"", timeout_s: float = 10.0) -> bytes:
    resp = await pool.request(b"POST" if body else b"GET", path, [], body, timeout_s=timeout_s)
    assert resp.status == 200
    return b"".join([c async for c in resp.chunks()])


async def test_many_concurrent_requests_share_one_connection(h2_server: ScriptedServer) -> None:
    """Fifty concurrent streaming requests complete over a single h2c connection."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    bodies = await asyncio.gather(*(_get(pool, b"/stream?n=5&ms=5") for _ in range(50)))
    assert all(b == b"".join(f"chunk-{i}\n".encode() for i in range(5)) for b in bodies)
    assert len(h2_server.connections) == 1
    assert pool.connections == 1
    await pool.close()


async def test_stream_limit_opens_more_connections(h2_server: ScriptedServer) -> None:
    """Past the per-connection stream limit the pool opens another connection, up to its cap."""
    pool = H2Pool("127.0.0.1", h2_server.port, max_streams_per_connection=4, max_connections=3)
    bodies = await asyncio.gather(*(_get(pool, b"/stream?n=3&ms=20") for _ in range(20)))
    assert len(bodies) == 20
    assert len(h2_server.connections) == 3
    await pool.close()


async def test_large_upload_crosses_many_windows(h2_server: ScriptedServer) -> None:
    """A 3 MiB body, far beyond the peer's 64 KiB initial windows, arrives whole."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    assert await _get(pool, b"/echo", b"a" * (3 << 20)) == str(3 << 20).encode()
    await pool.close()


async def test_stalled_upload_does_not_block_other_streams(h2_server: ScriptedServer) -> None:
    """An upload waiting for WINDOW_UPDATE leaves the other streams on the connection flowing."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    await _get(pool, b"/echo", b"warm")  # one connection, settings exchanged
    h2_server.hold_uploads = True
    upload = asyncio.create_task(_get(pool, b"/echo", b"u" * 500_000))
    await asyncio.sleep(0.1)
    h2_server.hold_uploads = False
    fast = await asyncio.gather(*(_get(pool, b"/echo", b"abc") for _ in range(10)))
    assert fast == [b"3"] * 10
    assert not upload.done()
    h2_server.release_uploads()
    assert await asyncio.wait_for(upload, 5) == b"500000"
    assert len(h2_server.connections) == 1
    await pool.close()


async def test_slow_reader_does_not_block_other_streams(h2_server: ScriptedServer) -> None:
    """A response nobody reads fills only its own stream window; other streams keep flowing."""
    pool = H2Pool("127.0.0.1", h2_server.port, stream_window_bytes=256 * 1024)
    big = await pool.request(b"GET", b"/big?bytes=8000000", [], b"", timeout_s=20)
    await asyncio.sleep(0.2)  # the server fills the 256 KiB window and stalls
    fast = await asyncio.gather(*(_get(pool, b"/stream?n=2&ms=1") for _ in range(10)))
    assert len(fast) == 10
    total = 0
    async for chunk in big.chunks():
        total += len(chunk)
    assert total == 8_000_000
    assert len(h2_server.connections) == 1
    await pool.close()


async def test_refused_stream_is_unreachable(h2_server: ScriptedServer) -> None:
    """RST_STREAM(REFUSED_STREAM) means the worker did no work: UpstreamUnreachable (retryable)."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    with pytest.raises(UpstreamUnreachable):
        await pool.request(b"GET", b"/refuse", [], b"", timeout_s=5)
    assert await _get(pool, b"/echo", b"ok") == b"2"
    await pool.close()


async def test_reset_mid_answer_is_incomplete(h2_server: ScriptedServer) -> None:
    """A stream reset after its headers yields the bytes received, then UpstreamBodyIncomplete."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    resp = await pool.request(b"GET", b"/reset", [], b"", timeout_s=5)
    got = b""
    with pytest.raises(UpstreamBodyIncomplete):
        async for chunk in resp.chunks():
            got += chunk
    assert got == b"partial"
    await pool.close()


async def test_connection_dying_mid_answer_is_replaced(h2_server: ScriptedServer) -> None:
    """A connection closed mid-answer fails that stream; the next request gets a fresh connection."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    resp = await pool.request(b"GET", b"/die", [], b"", timeout_s=5)
    with pytest.raises(UpstreamBodyIncomplete):
        async for _ in resp.chunks():
            pass
    assert await _get(pool, b"/echo", b"again") == b"5"
    assert len(h2_server.connections) == 2
    await pool.close()


async def test_goaway_refused_stream_is_retried_on_a_fresh_connection(h2_server: ScriptedServer) -> None:
    """GOAWAY: a stream above last_stream_id is resent on a new connection; earlier ones finish."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    early = await pool.request(b"GET", b"/stream?n=5&ms=30", [], b"", timeout_s=5)
    assert await _get(pool, b"/goaway") == b"fresh"  # refused on connection 1, answered on 2
    body = b"".join([c async for c in early.chunks()])
    assert body.count(b"chunk-") == 5
    assert await _get(pool, b"/echo", b"next") == b"4"
    assert len(h2_server.connections) == 2
    await pool.close()


async def test_refused_twice_is_unreachable(h2_server: ScriptedServer) -> None:
    """A worker refusing the stream again: UpstreamUnreachable after two tries (retryable elsewhere)."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    with pytest.raises(UpstreamUnreachable):
        await pool.request(b"GET", b"/refuse", [], b"", timeout_s=5)
    assert h2_server.requests == 2
    await pool.close()


async def test_request_timeout_resets_the_stream(h2_server: ScriptedServer) -> None:
    """Past timeout_s the request raises UpstreamTimeout and the worker sees RST_STREAM(CANCEL)."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    with pytest.raises(UpstreamTimeout):
        await pool.request(b"GET", b"/hang", [], b"", timeout_s=0.2)
    await asyncio.sleep(0.05)
    assert h2_server.resets == [ErrorCodes.CANCEL]
    assert await _get(pool, b"/echo", b"x") == b"1"
    await pool.close()


async def test_abort_cancels_only_that_stream(h2_server: ScriptedServer) -> None:
    """abort() sends RST_STREAM(CANCEL); the connection keeps serving other requests."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    resp = await pool.request(b"GET", b"/stream?n=100&ms=10", [], b"", timeout_s=5)
    first = await anext(aiter(resp.chunks()))
    assert first.startswith(b"chunk-0")
    resp.abort()
    await asyncio.sleep(0.05)
    assert h2_server.resets == [ErrorCodes.CANCEL]
    assert await _get(pool, b"/echo", b"yz") == b"2"
    assert len(h2_server.connections) == 1
    await pool.close()


async def test_connect_refused_is_unreachable() -> None:
    """A worker address nobody listens on raises UpstreamUnreachable."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = H2Pool("127.0.0.1", port)
    with pytest.raises(UpstreamUnreachable):
        await pool.request(b"GET", b"/", [], b"", timeout_s=2)
    await pool.close()


async def test_complete_small_answer_is_buffered(h2_server: ScriptedServer) -> None:
    """A small answer that arrived whole is available in one piece via buffered_body()."""
    pool = H2Pool("127.0.0.1", h2_server.port)
    resp = await pool.request(b"POST", b"/echo", [(b"content-type", b"text/plain")], b"hello", timeout_s=5)
    await asyncio.sleep(0.01)
    assert resp.buffered_body() == b"5"
    assert (b"content-type", b"text/plain") in resp.headers
    await pool.close()
