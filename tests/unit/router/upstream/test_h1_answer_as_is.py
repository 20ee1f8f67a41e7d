"""A worker's HTTP/1.1 answer forwarded as it came (``H1Response.as_is``), fed to the upstream
connection as exact reads: when the bytes may go to a client unchanged, and that a client parses
them exactly as the answer the router would have encoded itself."""

from __future__ import annotations

import asyncio

import httptools
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.router.headers import DROPPED
from dataplane.router.upstream.h1.connection import H1Connection, H1Response
from dataplane.router.upstream.h1.pool import H1Pool
from tests.fakes.transport import RecordingTransport

EXTRA = b"x-contract-revision: 7\r\n"
BODY = b'{"object":"chat.completion","choices":[]}'


def _answer(head_lines: bytes, body: bytes = BODY, status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return status + b"\r\n" + head_lines + b"content-length: %d\r\n\r\n" % len(body) + body


async def _receive(*reads: bytes) -> H1Response:
    """The response an upstream connection parses from ``reads`` (one ``data_received`` each)."""
    conn = H1Connection(H1Pool("127.0.0.1", 9))
    conn.connection_made(RecordingTransport())
    now = asyncio.get_running_loop().time()
    waiter = conn.send(b"POST / HTTP/1.1\r\n\r\n", b"", now, now + 10)
    for data in reads:
        conn.data_received(data)
    return await waiter


async def test_a_whole_answer_is_forwarded_as_the_worker_wrote_it_with_the_extra_lines_last() -> None:
    """One read with the whole answer: its bytes, names' case and odd spacing kept, the extra
    header lines after the worker's own."""
    head = b"Date: Sun, 06 Dec 2026 02:14:09 GMT\r\nserver: uvicorn\r\nContent-Type:application/json\r\n"
    response = await _receive(_answer(head))
    expected = b"HTTP/1.1 200 OK\r\n" + head + b"content-length: %d\r\n" % len(BODY) + EXTRA + b"\r\n" + BODY
    assert response.as_is(EXTRA) == expected
    assert response.as_is(b"") == _answer(head)


async def test_hop_by_hop_or_framing_headers_make_the_head_be_written_anew() -> None:
    """Connection, Keep-Alive, Transfer-Encoding (and every other hop-by-hop name, RFC 9110
    §7.6.1) never pass: the answer is encoded again from its headers, which lack them."""
    for line in (b"Connection: keep-alive\r\n", b"Keep-Alive: timeout=5\r\n", b"TE: trailers\r\n"):
        response = await _receive(_answer(b"server: w\r\n" + line))
        assert response.as_is(EXTRA) is None
        assert response.headers == [(b"server", b"w")]
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    response = await _receive(chunked)
    assert response.as_is(EXTRA) is None and response.buffered_body() == b"hi"


async def test_an_answer_in_several_reads_or_after_an_interim_one_is_written_anew() -> None:
    """Head and body in two reads, a 103 before the answer in the same read, or a head split
    across reads: not forwarded as is (the read does not hold exactly the answer)."""
    answer = _answer(b"server: w\r\n")
    split = answer.index(b"\r\n\r\n") + 4
    assert (await _receive(answer[:split], answer[split:])).as_is(EXTRA) is None
    assert (await _receive(answer[:20], answer[20:])).as_is(EXTRA) is None
    early = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + answer
    response = await _receive(early)
    assert response.as_is(EXTRA) is None
    assert response.status == 200 and response.headers == [(b"server", b"w")]


async def test_bytes_after_the_answer_are_never_forwarded() -> None:
    """A read that carries more than the answer (a worker sending ahead of any request): the
    answer is written anew, the stray bytes stay behind."""
    answer = _answer(b"server: w\r\n")
    for stray in (b"\r\n", b"HTTP/1.1 200 OK\r\n", b"x"):
        response = await _receive(answer + stray)
        assert response.as_is(EXTRA) is None
        assert response.buffered_body() == BODY


async def test_other_status_lines_and_closing_workers_are_written_anew() -> None:
    """An HTTP/1.0 answer, a reason phrase other than the router's own, no Content-Length
    (delimited by the close) or a worker closing the connection: encoded again."""
    cases = [
        _answer(b"", status=b"HTTP/1.0 200 OK"),
        _answer(b"", status=b"HTTP/1.1 200 Fine"),
        _answer(b"", status=b"HTTP/1.1 200"),
        _answer(b"connection: close\r\n"),
    ]
    for answer in cases:
        assert (await _receive(answer)).as_is(EXTRA) is None
    assert (await _receive(_answer(b"", status=b"HTTP/1.1 404 Not Found"))).as_is(EXTRA) is not None


class _Parsed:
    """What an HTTP/1.1 client reads from an answer: status, headers, body, complete."""

    def __init__(self, data: bytes) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.complete = False
        parser = httptools.HttpResponseParser(self)
        parser.feed_data(data)
        self.status = parser.get_status_code()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


_NAMES = st.sampled_from(
    [
        b"date",
        b"Server",
        b"content-type",
        b"X-Request-Id",
        b"Connection",
        b"keep-alive",
        b"TRAILER",
        b"Upgrade",
    ]
)
_VALUES = st.binary(min_size=0, max_size=12).map(lambda v: bytes(b if 0x21 <= b <= 0x7E else 0x61 for b in v))
_SPACES = st.sampled_from([b"", b" ", b"  ", b"\t"])


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.tuples(_NAMES, _SPACES, _VALUES), max_size=6),
    body=st.binary(max_size=64),
    cut=st.integers(min_value=0, max_value=400),
)
def test_what_goes_as_is_reads_as_the_answer_plus_the_extra_headers(
    lines: list[tuple[bytes, bytes, bytes]], body: bytes, cut: int
) -> None:
    """Whatever the head and however it is cut into reads: forwarded bytes, when there are any,
    read as a complete answer with the worker's status, its headers that cross a proxy (RFC 9110
    §7.6.1), the extra header, and its body, and nothing after it."""
    head = b"".join(name + b":" + space + value + b"\r\n" for name, space, value in lines)
    answer = _answer(head, body)
    reads = [answer] if cut == 0 or cut >= len(answer) else [answer[:cut], answer[cut:]]
    response = asyncio.run(_receive(*reads))
    forwarded = response.as_is(EXTRA)
    if forwarded is None:
        return
    client = _Parsed(forwarded)
    assert client.complete and client.status == 200 and client.body == body
    kept = [(n.lower(), v) for n, _, v in lines if n.lower() not in DROPPED]
    assert client.headers == [*kept, (b"content-length", b"%d" % len(body)), (b"x-contract-revision", b"7")]
    assert not any(name in DROPPED - {b"content-length"} for name, _ in client.headers)
