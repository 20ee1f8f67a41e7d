"""HTTP/1.1 connection logic fed through a recording transport (no sockets): read boundaries never matter."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.context import ServerContext
from dataplane.http.http1 import Http1Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import Request, Responder
from tests.fakes.transport import RecordingTransport, feed_reads


async def _echo(req: Request, resp: Responder) -> None:
    # Later requests finish first: order must still be the request order.
    await asyncio.sleep(0.001 * (4 - len(req.body) % 4))
    if req.path == b"/stream":
        resp.start(200, [(b"x-path", req.path)])
        await resp.write(b"s1-" + req.body)
        await resp.write(b"s2")
        resp.end()
    else:
        resp.respond(200, [(b"x-path", req.path)], req.method + b" " + req.body)


PIPELINE = (
    b"GET /a HTTP/1.1\r\nhost: t\r\n\r\n"
    b"POST /b HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n\r\nhello"
    b"POST /stream HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\nx-trailer: 1\r\n\r\n"
    b"HEAD /c HTTP/1.1\r\nhost: t\r\n\r\n"
    b"POST /d HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


async def _serve(chunks: list[bytes], **limits: Any) -> RecordingTransport:
    transport = await feed_reads(_echo, chunks, **limits)
    for _ in range(200):
        if transport.closed:
            break
        await asyncio.sleep(0.002)
    return transport


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


EXPECTED = (
    b"HTTP/1.1 200 OK\r\nx-path: /a\r\ncontent-length: 4\r\n\r\nGET "
    b"HTTP/1.1 200 OK\r\nx-path: /b\r\ncontent-length: 10\r\n\r\nPOST hello"
    b"HTTP/1.1 200 OK\r\nx-path: /stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"7\r\ns1-abcd\r\n2\r\ns2\r\n0\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nx-path: /c\r\ncontent-length: 5\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nx-path: /d\r\ncontent-length: 5\r\nconnection: close\r\n\r\nPOST "
)


def test_pipeline_in_one_read_gives_exact_answers() -> None:
    """Five pipelined requests in one read get exactly these answers, in order, then a close."""
    transport = asyncio.run(_serve([PIPELINE]))
    assert bytes(transport.out) == EXPECTED
    assert transport.closed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(PIPELINE)), max_size=25))
def test_read_boundaries_never_change_the_answers(cuts: list[int]) -> None:
    """However the pipelined bytes are split across reads, the answers are byte-identical."""
    transport = asyncio.run(_serve(_split(PIPELINE, cuts)))
    assert bytes(transport.out) == EXPECTED
    assert transport.closed


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_chunked_body_over_limit_is_refused_whatever_the_splits(cuts: list[int]) -> None:
    """A chunked body over max_body_bytes gets 413 whatever the read boundaries, and nothing else."""
    chunk = b"20\r\n" + b"z" * 32 + b"\r\n"
    raw = b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 9
    transport = asyncio.run(_serve(_split(raw, cuts), max_body_bytes=100))
    assert transport.out.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert transport.out.count(b"HTTP/1.1") == 1
    assert transport.closed


def test_chunked_trailers_never_become_headers() -> None:
    """Trailer fields of a chunked body are ignored, never merged into the request headers."""
    seen: list[list[tuple[bytes, bytes]]] = []

    async def record(req: Request, resp: Responder) -> None:
        seen.append(req.headers)
        resp.respond(200, [], req.body)

    async def serve() -> RecordingTransport:
        ctx = ServerContext(handler=record, limits=ServerLimits(), loop=asyncio.get_running_loop())
        conn = Http1Connection(ctx)
        transport = RecordingTransport()
        conn.connection_made(transport)
        conn.data_received(
            b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
            b"2\r\nok\r\n0\r\nauthorization: forged\r\nhost: evil\r\n\r\n"
        )
        await asyncio.sleep(0.01)
        return transport

    transport = asyncio.run(serve())
    assert transport.out.endswith(b"\r\n\r\nok")
    assert seen == [[(b"host", b"t"), (b"transfer-encoding", b"chunked")]]


def test_endless_trailer_is_refused() -> None:
    """A trailer that never ends is refused with 413 once the raw body bound is passed."""

    async def serve() -> RecordingTransport:
        ctx = ServerContext(
            handler=_echo, limits=ServerLimits(max_body_bytes=1000), loop=asyncio.get_running_loop()
        )
        conn = Http1Connection(ctx)
        transport = RecordingTransport()
        conn.connection_made(transport)
        conn.data_received(b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx-pad: ")
        for _ in range(200):
            conn.data_received(b"a" * 1024)
            if transport.closed:
                break
        await asyncio.sleep(0)
        return transport

    transport = asyncio.run(serve())
    assert transport.out.startswith(b"HTTP/1.1 413 ")
    assert transport.closed


def test_nothing_is_answered_after_a_handler_closes_the_connection() -> None:
    """A handler answering ``connection: close`` ends the connection: later pipelined requests get nothing."""
    calls: list[bytes] = []

    def closing(req: Request, resp: Responder) -> None:
        calls.append(req.path)
        resp.respond(200, [(b"connection", b"close")] if req.path == b"/first" else [], b"x")

    async def serve() -> RecordingTransport:
        ctx = ServerContext(handler=closing, limits=ServerLimits(), loop=asyncio.get_running_loop())
        conn = Http1Connection(ctx)
        transport = RecordingTransport()
        conn.connection_made(transport)
        conn.data_received(b"GET /first HTTP/1.1\r\nhost: t\r\n\r\nGET /second HTTP/1.1\r\nhost: t\r\n\r\n")
        await asyncio.sleep(0)
        return transport

    transport = asyncio.run(serve())
    assert transport.out == b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx"
    assert transport.closed
    assert calls == [b"/first"]
