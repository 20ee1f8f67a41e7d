"""The h2c upstream pool against a real ``engine-sim --http2`` (SPEC §1: h2c workers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from dataplane.router.upstream.h2c.pool import H2Pool
from tests.fakes.engine_sim import EngineSim

JSON = [(b"content-type", b"application/json")]


@pytest.fixture(scope="module")
def sim() -> AsyncIterator[EngineSim]:
    with EngineSim("--http2", "--decode-tokens-per-s", "400", "--max-total-tokens", "4000000") as s:
        yield s  # type: ignore[misc]


def _chat(max_tokens: int, *, stream: bool = False, pad: int = 0) -> bytes:
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "x" * pad or "hi"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return json.dumps(body).encode()


async def _complete(pool: H2Pool, body: bytes) -> tuple[int, bytes]:
    resp = await pool.request(b"POST", b"/v1/chat/completions", JSON, body, timeout_s=30)
    data = resp.buffered_body()
    if data is None:
        data = b"".join([c async for c in resp.chunks()])
    return resp.status, data


async def test_server_info_says_http2(sim: EngineSim) -> None:
    """engine-sim --http2 answers /server_info over h2c with enable_http2: true."""
    pool = H2Pool(sim.host, sim.port)
    resp = await pool.request(b"GET", b"/server_info", [], b"", timeout_s=5)
    body = resp.buffered_body() or b"".join([c async for c in resp.chunks()])
    assert resp.status == 200
    assert json.loads(body)["enable_http2"] is True
    await pool.close()


async def test_concurrent_streams_over_one_connection(sim: EngineSim) -> None:
    """Forty concurrent chat completions (half streaming) all succeed over one h2c connection."""
    pool = H2Pool(sim.host, sim.port)
    results = await asyncio.gather(*(_complete(pool, _chat(8, stream=i % 2 == 0)) for i in range(40)))
    assert [status for status, _ in results] == [200] * 40
    streamed = [body for i, (_, body) in enumerate(results) if i % 2 == 0]
    assert all(body.rstrip().endswith(b"data: [DONE]") for body in streamed)
    assert pool.connections == 1
    await pool.close()


async def test_large_upload_beside_fast_streams(sim: EngineSim) -> None:
    """A 1 MiB request body and many small requests share one connection and all complete."""
    pool = H2Pool(sim.host, sim.port)
    big = asyncio.create_task(_complete(pool, _chat(4, pad=1 << 20)))
    small = await asyncio.gather(*(_complete(pool, _chat(2)) for _ in range(20)))
    assert [s for s, _ in small] == [200] * 20
    status, body = await asyncio.wait_for(big, 20)
    assert status == 200, body[:200]
    assert pool.connections == 1
    await pool.close()


async def test_slow_reader_beside_fast_streams(sim: EngineSim) -> None:
    """A streaming answer nobody reads for a while does not delay other streams on the connection."""
    pool = H2Pool(sim.host, sim.port, stream_window_bytes=16 * 1024)
    slow = await pool.request(b"POST", b"/v1/chat/completions", JSON, _chat(400, stream=True), timeout_s=30)
    await asyncio.sleep(0.3)  # its events pile up against a 16 KiB window
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    fast = await asyncio.gather(*(_complete(pool, _chat(4)) for _ in range(10)))
    assert [s for s, _ in fast] == [200] * 10
    assert loop.time() - t0 < 2.0
    body = b"".join([c async for c in slow.chunks()])
    assert body.rstrip().endswith(b"data: [DONE]")
    assert body.count(b"data: ") >= 400
    assert pool.connections == 1
    await pool.close()
