"""Request body memory of the shared server (SPEC §5): a cap on the body bytes held across
connections (the largest bodies still arriving are refused first) and a per-connection cap on
bodies in transit, over real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json

from dataplane.http import Request, Responder
from tests.fakes.http_server import H2Client, h1_open, post, serving

TEXT = [(b"content-type", b"text/plain")]
KIB = 1024


async def sized(req: Request, resp: Responder) -> None:
    resp.respond(200, TEXT, b"%d" % len(req.body))


def head(size: int, path: str = "/up") -> bytes:
    return f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-length: {size}\r\n\r\n".encode()


async def test_the_largest_body_still_arriving_is_refused_to_make_room() -> None:
    """Cap 2 MiB: two stalled 900 KiB bodies, then a 400 KiB one that would pass the cap: the
    stalled body that is larger than it gets 503 buffers_full and its connection closes;
    the new body and a small request are answered."""
    async with serving(sized, max_body_bytes=1024 * KIB, max_buffered_body_bytes=2048 * KIB) as server:
        (r1, w1), (r2, w2) = await h1_open(server.port), await h1_open(server.port)
        for w in (w1, w2):
            w.write(head(1024 * KIB) + b"a" * (900 * KIB))
            await w.drain()
        await asyncio.sleep(0.2)
        r3, w3 = await h1_open(server.port)
        w3.write(post("/up", b"b" * (400 * KIB)))
        answer = await r3.read()
        assert (answer.status, answer.body) == (200, b"409600")
        refused = []
        for reader in (r1, r2):
            with contextlib.suppress(TimeoutError):
                refused.append(await reader.read(wait_s=0.5))
        assert [a.status for a in refused] == [503]
        assert refused[0].header(b"x-router-error-code") == b"buffers_full"
        assert json.loads(refused[0].body)["error"]["code"] == "buffers_full"
        assert refused[0].header(b"connection") == b"close"
        r4, w4 = await h1_open(server.port)
        w4.write(post("/small", b"c" * 100))
        assert (await r4.read()).status == 200
        for w in (w1, w2, w3, w4):
            w.close()


async def test_a_body_larger_than_every_other_is_the_one_refused() -> None:
    """When the asking body is the largest, it is refused itself and the others stay."""
    async with serving(sized, max_body_bytes=1024 * KIB, max_buffered_body_bytes=1536 * KIB) as server:
        small_r, small_w = await h1_open(server.port)
        small_w.write(head(600 * KIB) + b"a" * (550 * KIB))
        await small_w.drain()
        await asyncio.sleep(0.1)
        big_r, big_w = await h1_open(server.port)
        big_w.write(head(1024 * KIB) + b"b" * (1024 * KIB))
        assert (await big_r.read()).status == 503
        small_w.write(b"a" * (50 * KIB))
        assert (await small_r.read()).status == 200
        small_w.close()
        big_w.close()


async def test_bodies_of_requests_not_yet_answered_still_count() -> None:
    """A complete body whose handler has not answered yet holds its bytes: the next body that
    would pass the cap is refused (nothing in transit to take them from); once the first is
    answered there is room again."""
    release = asyncio.Event()

    async def slow(req: Request, resp: Responder) -> None:
        if req.path == b"/hold":
            await release.wait()
        resp.respond(200, TEXT, b"%d" % len(req.body))

    async with serving(slow, max_body_bytes=1024 * KIB, max_buffered_body_bytes=1024 * KIB) as server:
        r1, w1 = await h1_open(server.port)
        w1.write(post("/hold", b"h" * (800 * KIB)))
        await asyncio.sleep(0.2)
        r2, w2 = await h1_open(server.port)
        w2.write(post("/next", b"n" * (300 * KIB)))
        assert (await r2.read()).status == 503
        release.set()
        assert (await r1.read()).body == b"819200"
        r3, w3 = await h1_open(server.port)
        w3.write(post("/next", b"n" * (300 * KIB)))
        assert (await r3.read()).status == 200
        for w in (w1, w2, w3):
            w.close()


async def test_h2_bodies_in_transit_on_one_connection_are_capped() -> None:
    """max_connection_body_bytes 1 MiB: a third stream pushing the connection's unfinished bodies
    past it is refused 503 and reset; the two others complete; the windows we advertise are no
    larger than the cap."""
    async with serving(sized, max_body_bytes=512 * KIB, max_connection_body_bytes=1024 * KIB) as server:
        client = await H2Client.open(server.port)
        assert client.conn.remote_settings.initial_window_size == 1024 * KIB
        a, b, c = (client.request(b"POST", b"/up", end=False) for _ in range(3))
        await client.send_body(a, b"a" * (400 * KIB), end=False)
        await client.send_body(b, b"b" * (400 * KIB), end=False)
        await client.send_body(c, b"c" * (400 * KIB), end=False)
        refused = await client.response(c)
        assert refused.status == 503
        assert dict(refused.headers)[b"x-router-error-code"] == b"buffers_full"
        await client.send_body(a, b"a" * (100 * KIB))
        await client.send_body(b, b"b" * (100 * KIB))
        assert bytes((await client.response(a)).body) == b"512000"
        assert bytes((await client.response(b)).body) == b"512000"
        await client.close()


async def test_h2_streams_share_the_server_cap() -> None:
    """Cap 1.5 MiB over h2: a stalled 1 MiB stream on one connection is refused to make room for a
    smaller complete body on another connection."""
    async with serving(sized, max_body_bytes=1024 * KIB, max_buffered_body_bytes=1536 * KIB) as server:
        stalled = await H2Client.open(server.port)
        big = stalled.request(b"POST", b"/big", end=False)
        await stalled.send_body(big, b"s" * (1000 * KIB), end=False)
        await asyncio.sleep(0.1)
        other = await H2Client.open(server.port)
        sid = other.request(b"POST", b"/up", end=False)
        await other.send_body(sid, b"o" * (700 * KIB))
        assert bytes((await other.response(sid)).body) == b"716800"
        assert (await stalled.response(big)).status == 503
        await stalled.close()
        await other.close()
