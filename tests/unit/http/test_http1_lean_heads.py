"""The HTTP/1.1 front door reads a head from its bytes when it can (``Http1Connection``'s lean
parser, ``Request.lines``), and with httptools' ``on_header`` otherwise: a handler sees the same
request either way, whatever the read boundaries, pipelining or fields."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.request import Request, Responder
from dataplane.http.wire import field_list
from dataplane.router.headers import end_to_end
from tests.fakes.transport import RecordingTransport, feed_reads

Seen = tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes | None, bytes]


async def _serve(chunks: list[bytes], **limits: int) -> tuple[list[Seen], RecordingTransport]:
    seen: list[Seen] = []

    def record(req: Request, resp: Responder) -> None:
        seen.append((req.method, req.path, req.headers, req.lines, req.body))
        resp.respond(200, [], b"ok")

    transport = await feed_reads(record, chunks, **limits)
    await asyncio.sleep(0.01)
    return seen, transport


def _run(chunks: list[bytes], **limits: int) -> tuple[list[Seen], RecordingTransport]:
    return asyncio.run(_serve(chunks, **limits))


# Requests, each with the header list httptools hands over (names lower-cased).
PLAIN = (
    b"POST /v1/chat HTTP/1.1\r\nHost: r:1\r\nContent-Type: application/json\r\n"
    b"X-Trace:  a b  \r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nbody"
)
PLAIN_LIST = [
    (b"host", b"r:1"),
    (b"content-type", b"application/json"),
    (b"x-trace", b"a b  "),
    (b"connection", b"keep-alive"),
    (b"content-length", b"4"),
]
LISTED = b"POST /v1/chat HTTP/1.1\r\nhost: r\r\nTE: trailers\r\ncontent-length: 2\r\n\r\nhi"
LISTED_LIST = [(b"host", b"r"), (b"te", b"trailers"), (b"content-length", b"2")]
BARE = b"GET /health HTTP/1.1\r\nhost: r\r\n\r\n"
CHUNKED = b"POST /c HTTP/1.1\r\nhost: r\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
SPACED = b"GET  /spaced HTTP/1.1\r\nhost: r\r\nx-a: 1\r\n\r\n"  # llhttp takes two spaces
LED = b"\r\nGET /led HTTP/1.1\r\nhost: r\r\nx-b3: 1\r\n\r\n"  # an empty line first (RFC 9112 §2.2)

PIPELINE = [
    (PLAIN, b"/v1/chat", PLAIN_LIST, b"body"),
    (BARE, b"/health", [(b"host", b"r")], b""),
    (LISTED, b"/v1/chat", LISTED_LIST, b"hi"),
    (CHUNKED, b"/c", [(b"host", b"r"), (b"transfer-encoding", b"chunked")], b"ab"),
    (SPACED, b"/spaced", [(b"host", b"r"), (b"x-a", b"1")], b""),
    (LED, b"/led", [(b"host", b"r"), (b"x-b3", b"1")], b""),
    (PLAIN, b"/v1/chat", PLAIN_LIST, b"body"),
]


def _check(seen: list[Seen], expected: list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]]) -> None:
    assert [(path, headers, body) for _, path, headers, _, body in seen] == [
        (path, headers, body) for _, path, headers, body in expected
    ]
    for _, _, headers, lines, _ in seen:
        if lines is not None:  # read lean: the lines are what the list would forward
            assert field_list(lines) == end_to_end(headers)


def test_a_head_whole_in_its_read_is_read_from_its_bytes() -> None:
    """One request per read, as clients send them: each read lean, the forwarded lines the
    client's own (case and spacing kept) without Host, Content-Length and Connection."""
    seen, transport = _run([PLAIN, PLAIN])
    assert transport.out.count(b"HTTP/1.1 200 OK") == 2
    assert [lines for _, _, _, lines, _ in seen] == [
        b"\r\nContent-Type: application/json\r\nX-Trace:  a b  "
    ] * 2
    _check(seen, [PIPELINE[0], PIPELINE[0]])


def test_a_request_line_not_as_counted_is_read_by_the_listing_parser() -> None:
    """A request line with two spaces (llhttp takes it) or after an empty line, first on its
    connection: where its head begins is not where the lean parser counts, so it is listed."""
    for raw, path, headers, body in (PIPELINE[4], PIPELINE[5]):
        seen, _ = _run([raw])
        assert seen[0][3] is None
        _check(seen, [(raw, path, headers, body)])


def test_a_head_that_needs_its_list_is_read_again_by_the_listing_parser() -> None:
    """TE (a field the proxy drops by name) sends the request to the parser that lists headers,
    and later requests of the connection stay there: same requests, no lines."""
    seen, _ = _run([LISTED, PLAIN])
    assert [lines for _, _, _, lines, _ in seen] == [None, None]
    _check(seen, [PIPELINE[2], PIPELINE[0]])


def test_pipelined_requests_in_one_read_are_each_seen_as_sent() -> None:
    seen, transport = _run([b"".join(raw for raw, *_ in PIPELINE)])
    assert transport.out.count(b"HTTP/1.1 200 OK") == len(PIPELINE)
    assert seen[0][3] is not None  # the first one lean, the rest after it listed
    _check(seen, list(PIPELINE))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=600), max_size=12))
def test_read_boundaries_never_change_what_a_handler_sees(cuts: list[int]) -> None:
    """However the pipelined bytes are split across reads (a head cut in two, a request line
    not begun, a body that goes on), every request reaches the handler exactly as sent."""
    data = b"".join(raw for raw, *_ in PIPELINE)
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)]) if b > a]
    seen, transport = _run(chunks)
    assert transport.out.count(b"HTTP/1.1 200 OK") == len(PIPELINE)
    _check(seen, list(PIPELINE))


def test_lean_heads_keep_the_front_doors_limits() -> None:
    """A Content-Length over the body limit is refused before the body is read, and a head over
    the header limit gets 431, on the lean path as on the other."""
    _, transport = _run([b"POST / HTTP/1.1\r\nhost: r\r\ncontent-length: 500\r\n\r\n"], max_body_bytes=100)
    assert transport.out.startswith(b"HTTP/1.1 413 ")
    big = b"GET / HTTP/1.1\r\nhost: r\r\nx-pad: " + b"a" * 300 + b"\r\n\r\n"
    _, transport = _run([big], max_header_bytes=200)
    assert transport.out.startswith(b"HTTP/1.1 431 ")
