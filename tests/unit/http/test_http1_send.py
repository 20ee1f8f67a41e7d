"""The HTTP/1.1 responder's synchronous streaming calls (``start_sending``, ``send``,
``send_last``, ``writable``: what the router's callback relay uses) frame an answer exactly as
``start``/``write``/``end`` do, in request order behind pipelined answers, for HEAD and HTTP/1.0."""

from __future__ import annotations

import asyncio

from dataplane.http.context import ServerContext
from dataplane.http.http1 import Http1Connection
from dataplane.http.limits import ServerLimits
from dataplane.http.request import Request, Responder
from tests.fakes.transport import RecordingTransport

SSE = [(b"content-type", b"text/event-stream")]


async def _handler(req: Request, resp: Responder) -> None:
    assert resp.sends_now
    if req.path == b"/slow":  # answered after the streams queued behind it
        await asyncio.sleep(0.01)
        resp.respond(200, [], b"slow")
        return
    if req.method == b"GET":  # the last request, closing the connection
        resp.respond(200, [], b"")
        return
    first, middle, last = req.body.split(b",")
    if not resp.start_sending(200, SSE, first):
        await resp.writable()  # behind an answer still going out
    for part in middle.split(b"+"):
        if not resp.send(part):  # (an empty part sends nothing)
            await resp.writable()
    resp.send_last(last)


def _post(path: bytes, body: bytes, version: bytes = b"1.1", method: bytes = b"POST") -> bytes:
    return b"%s %s HTTP/%s\r\nhost: t\r\ncontent-length: %d\r\n\r\n%s" % (
        method,
        path,
        version,
        len(body),
        body,
    )


async def _serve(data: bytes) -> RecordingTransport:
    loop = asyncio.get_running_loop()
    conn = Http1Connection(ServerContext(handler=_handler, limits=ServerLimits(), loop=loop))
    transport = RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(data)
    for _ in range(200):
        if transport.closed:
            break
        await asyncio.sleep(0.002)
    return transport


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def test_streams_behind_a_pipelined_answer_are_framed_and_ordered() -> None:
    """A slow answer first, then two streams (one with empty first and last parts): each
    stream's chunks follow the answer before it, framed as chunks, ending with the last chunk."""
    data = (
        _post(b"/slow", b"")
        + _post(b"/s", b"a,b+c,d")
        + _post(b"/s", b",+x+,")
        + b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
    )
    transport = asyncio.run(_serve(data))
    out = bytes(transport.out)
    slow = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nslow"
    first = HEAD + b"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n1\r\nd\r\n0\r\n\r\n"
    second = HEAD + b"1\r\nx\r\n0\r\n\r\n"
    last = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    assert out == slow + first + second + last
    assert transport.closed


def test_head_and_http10_answers() -> None:
    """HEAD: the head alone (no framing: no body follows); HTTP/1.0: the bytes as they are, the
    connection closed after them."""
    head_only = asyncio.run(_serve(_post(b"/s", b"a,b,c", method=b"HEAD") + _post(b"/s", b"d,e,f", b"1.0")))
    assert (
        bytes(head_only.out)
        == b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
        + b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndef"
    )
    assert head_only.closed
