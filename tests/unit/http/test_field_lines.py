"""A request head's field lines read from its bytes (``wire.field_list``, ``wire.plain_lines``):
exactly what httptools' ``on_header`` hands over, and forwarded as-is only when the header list
would have been forwarded the same (``dataplane.router.headers.end_to_end``)."""

from __future__ import annotations

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.wire import field_list, fields_as_lines, plain_lines
from dataplane.router.headers import CODED, DROPPED, end_to_end


class _Listed:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))


def _listed(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header list httptools hands over for ``head`` (names lower-cased)."""
    listed = _Listed()
    httptools.HttpRequestParser(listed).feed_data(head)
    return listed.headers


def _block(head: bytes) -> bytes:
    """The field lines of ``head``, each led by CRLF (the form the front door reads)."""
    return head[head.index(b"\r\n") : head.index(b"\r\n\r\n")]


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\nHost: a\n\n",  # bare LF ends the lines
        b"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n",  # bare LF inside the head
        b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",  # bare CR
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",  # obs-fold
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\x00c\r\n\r\n",  # NUL
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\x7fc\r\n\r\n",  # DEL
        b"GET / HTTP/1.1\r\nHost: a\r\nX : b\r\n\r\n",  # space before the colon
        b"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n",  # empty name
        b"GET / HTTP/1.1\r\nHost: a\r\nXb\r\n\r\n",  # no colon
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx",  # two lengths
    ],
)
def test_llhttp_refuses_every_head_a_split_on_crlf_would_misread(head: bytes) -> None:
    """The premise of reading field lines with a split on CRLF: llhttp, as httptools ships it,
    refuses these heads, so the front door never reads one (an httptools upgrade that accepts
    one fails here)."""
    with pytest.raises(httptools.HttpParserError):
        httptools.HttpRequestParser(_Listed()).feed_data(head)


_NAMES = st.sampled_from(
    [
        "Host", "host", "Content-Length", "content-type", "Content-Type", "Connection", "connection",
        "Keep-Alive", "TE", "te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authorization",
        "proxy-connection", "Expect", "Content-Encoding", "X-Body-Compressed", "HTTP2-Settings",
        "Authorization", "x-api-key", "Accept", "accept-encoding", "User-Agent", "X-Request-Id",
        "x-stainless-os", "traceparent", "tenant", "host-name", "cont", "Connective", "expected",
        "proxyish", "x-b3-traceid", "priority", "kind", "upgraded", "TE-x",
    ]
)  # fmt: skip
_VALUES = st.text(alphabet=" \tabcXYZ0159,-=;/", max_size=12).map(lambda v: v.encode())
_CONNECTION_VALUES = st.sampled_from(
    [b"keep-alive", b"Keep-Alive", b" close ", b"close, x-hop", b"x-b3", b""]
)


@st.composite
def _heads(draw: st.DrawFn) -> bytes:
    fields = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=10))
    lines = []
    lengths = 0
    for name, value in fields:
        lower = name.lower()
        if lower == "content-length":
            if lengths:
                continue  # llhttp refuses two
            lengths += 1
            value = draw(
                st.sampled_from(
                    [b"0", b"5", b" 12 ", b"007", b"0000000000000000000000005", b"9999999999999999999"]
                )
            )
        elif lower == "connection":
            value = draw(_CONNECTION_VALUES)
        elif lower == "transfer-encoding":
            if lengths:
                continue  # llhttp refuses both
            lengths += 1
            value = b"chunked"
        lines.append(name.encode() + b":" + value)
    return b"POST /v1/x HTTP/1.1\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


@settings(max_examples=400, deadline=None)
@given(_heads())
def test_field_list_reads_what_on_header_hands_over(head: bytes) -> None:
    """Names lower-cased, values without their leading whitespace (trailing kept), in order."""
    assert field_list(_block(head)) == _listed(head)


_NEVER_PLAIN = (DROPPED | CODED) - {b"host", b"content-length", b"connection"}


def _may_need_the_list(listed: list[tuple[bytes, bytes]]) -> bool:
    """Whether a header list may be refused as lines: for a field the list handles, or by the
    documented prefixes ("proxy-", "x-b", "conn" but Connection), never for another name."""
    names = {name for name, _ in listed}
    options = [value.strip(b" \t").lower() for name, value in listed if name == b"connection"]
    return bool(
        names & _NEVER_PLAIN
        or any(o not in (b"keep-alive", b"close") for o in options)
        or any(n.startswith((b"proxy-", b"x-b", b"conn")) and n != b"connection" for n in names)
    )


@settings(max_examples=400, deadline=None)
@given(_heads())
def test_plain_lines_forward_what_the_header_list_would(head: bytes) -> None:
    """Lines forwarded as they came carry exactly the headers ``end_to_end`` keeps of the list,
    and the Content-Length llhttp read; a head is refused only for a field the list handles."""
    block = _block(head)
    listed = _listed(head)
    plain = plain_lines(block)
    names = {name for name, _ in listed}
    options = [value.strip(b" \t").lower() for name, value in listed if name == b"connection"]
    if plain is None:
        assert _may_need_the_list(listed)
        return
    lines, length, connection = plain
    assert field_list(lines) == end_to_end(listed)
    assert not names & _NEVER_PLAIN
    assert connection == bool(options)
    lengths = [value for name, value in listed if name == b"content-length"]
    if lengths:
        assert length == min(int(lengths[0]), 1 << 62)
    else:
        assert length == -1
    # Lines the worker reads as the client sent them, each led by CRLF.
    assert all(line in block for line in lines.split(b"\r\n"))
    assert lines == b"" or lines.startswith(b"\r\n")


@settings(max_examples=300, deadline=None)
@given(_heads())
def test_a_header_list_as_lines_forwards_what_the_list_would(head: bytes) -> None:
    """A header list without a head of bytes (an h2 request's fields) as lines: exactly the
    headers ``end_to_end`` keeps of it, in its order; refused only as ``plain_lines`` refuses."""
    listed = _listed(head)
    lines = fields_as_lines(listed)
    if lines is None:
        assert _may_need_the_list(listed)
        return
    assert field_list(lines) == end_to_end(listed)
    assert lines == b"" or lines.startswith(b"\r\n")


def test_every_name_the_proxy_drops_or_refuses_is_caught_in_any_case() -> None:
    """Each hop-by-hop, framing and coded name (but the three cut) keeps a head from going as
    it came, whatever its case; the three cut ones never reach the lines."""
    for name in sorted(_NEVER_PLAIN):
        for spelling in (name, name.upper(), name.title()):
            block = b"\r\nHost: a\r\n" + spelling + b": 1\r\nX-Ok: 2"
            assert plain_lines(block) is None, spelling
    plain = plain_lines(b"\r\nHOST: a\r\nX-Ok: 2\r\nConnection: Keep-Alive\r\nContent-LENGTH: 3")
    assert plain == (b"\r\nX-Ok: 2", 3, True)


def test_the_openai_clients_head_goes_as_it_came() -> None:
    """The official client's headers need no list: all but Host, Content-Length and its
    ``Connection: keep-alive`` go to the worker byte for byte, in its order."""
    from bench.loadgen import OPENAI_CLIENT_HEADERS

    sent = b"".join(f"\r\n{name}: {value}".encode() for name, value in OPENAI_CLIENT_HEADERS)
    block = b"\r\nHost: 127.0.0.1:8000" + sent + b"\r\nContent-Length: 1024"
    plain = plain_lines(block)
    assert plain is not None
    lines, length, connection = plain
    assert lines == sent.replace(b"\r\nConnection: keep-alive", b"")
    assert (length, connection) == (1024, True)
