"""Pure wire helpers of the HTTP server: detection, HTTP/1.1 framing, h2 headers, error answers."""

from __future__ import annotations

import json

import httptools
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.http.limits import ServerLimits
from dataplane.http.request import Request
from dataplane.http.wire import (
    H2_PREFACE,
    HEADERS_TOO_LARGE,
    MALFORMED,
    TIMED_OUT,
    TOO_LARGE,
    body_allowed,
    classify_preface,
    decimal,
    encode_chunk,
    encode_h1_head,
    h2_response_headers,
    length_line,
    lower_name,
    status_line,
)


def test_preface_detection_exact_cases() -> None:
    """The full preface is h2, a strict prefix needs more bytes, anything else is HTTP/1.1."""
    assert classify_preface(H2_PREFACE) == "h2"
    assert classify_preface(H2_PREFACE + b"\x00\x00\x12\x04") == "h2"
    assert classify_preface(b"PRI * HTTP/2.0\r\n") == "more"
    assert classify_preface(b"P") == "more"
    assert classify_preface(b"POST / HTTP/1.1\r\n") == "h1"
    assert classify_preface(b"GET / HTTP/1.1\r\n") == "h1"
    assert classify_preface(b"PRI * HTTP/1.1\r\n\r\n") == "h1"


@given(st.binary(min_size=1, max_size=40))
def test_preface_detection_property(data: bytes) -> None:
    """Detection says h2 exactly when the bytes start with the preface, "more" only on a strict prefix."""
    kind = classify_preface(data)
    if data.startswith(H2_PREFACE):
        assert kind == "h2"
    elif H2_PREFACE.startswith(data):
        assert kind == "more"
    else:
        assert kind == "h1"


def test_head_encoding_exact_bytes() -> None:
    """A complete answer's head: status line, handler headers, content-length, blank line."""
    head, close = encode_h1_head(200, [(b"content-type", b"text/plain")], 5, False, False)
    assert head == b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n"
    assert close is False


def test_head_encoding_drops_handler_framing_and_honours_connection_close() -> None:
    """Handler framing headers are dropped; ``connection: close`` from the handler forces close."""
    head, close = encode_h1_head(
        404,
        [
            (b"content-length", b"999"),
            (b"transfer-encoding", b"chunked"),
            (b"connection", b"Close"),
            (b"x", b"1"),
        ],
        None,
        True,
        False,
    )
    assert head == (
        b"HTTP/1.1 404 Not Found\r\nx: 1\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    assert close is True


@given(st.integers(min_value=0, max_value=1 << 40) | st.sampled_from([0, 8191, 8192, 8193]))
def test_lengths_are_written_in_decimal_whatever_was_written_before(n: int) -> None:
    # Twice: the second answer comes from the tables the first one filled.
    for _ in range(2):
        assert decimal(n) == str(n).encode()
        assert length_line(n) == b"content-length: %d\r\n" % n


def test_status_line_for_unknown_and_invalid_status() -> None:
    """Unregistered statuses get an empty reason phrase; impossible ones are refused."""
    assert status_line(299) == b"HTTP/1.1 299 \r\n"
    assert status_line(431) == b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    with pytest.raises(ValueError):
        status_line(42)


def test_bodyless_statuses() -> None:
    """1xx, 204 and 304 never carry content (RFC 9110 §6.4.1)."""
    assert [s for s in (100, 101, 200, 201, 204, 304, 404, 500) if not body_allowed(s)] == [
        100,
        101,
        204,
        304,
    ]


class _Collector:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


_token = st.binary(min_size=1, max_size=12).map(lambda b: bytes(97 + x % 26 for x in b))
_value = st.binary(max_size=30).map(lambda b: bytes(33 + x % 94 for x in b))


@given(
    st.sampled_from([200, 201, 400, 404, 413, 500, 503]),
    st.lists(st.tuples(_token.map(lambda t: b"x-" + t), _value), max_size=6),
    st.lists(st.binary(min_size=1, max_size=50), max_size=5),
    st.booleans(),
)
def test_encoded_answers_parse_back(
    status: int, headers: list[tuple[bytes, bytes]], pieces: list[bytes], chunked: bool
) -> None:
    """Whatever the headers and body, a standard parser reads back the same status, headers and body."""
    body = b"".join(pieces)
    if chunked:
        head, _ = encode_h1_head(status, headers, None, True, False)
        raw = head + b"".join(encode_chunk(p) for p in pieces) + b"0\r\n\r\n"
    else:  # a complete answer: the body joined behind the head, as ``H1Responder.respond`` asks
        raw, _ = encode_h1_head(status, headers, len(body), False, False, body)
        head, _ = encode_h1_head(status, headers, len(body), False, False)
        assert raw == head + body
    collector = _Collector()
    parser = httptools.HttpResponseParser(collector)
    parser.feed_data(raw)
    assert collector.complete
    assert parser.get_status_code() == status
    assert collector.body == body
    framing = {b"content-length", b"transfer-encoding"}
    assert [h for h in collector.headers if h[0] not in framing] == headers


def test_h2_headers_strip_connection_specific_fields() -> None:
    """h2 answers start with :status and never carry connection-specific fields (RFC 9113 §8.2.2)."""
    out = h2_response_headers(
        200,
        [
            (b"content-type", b"application/json"),
            (b"connection", b"keep-alive"),
            (b"keep-alive", b"timeout=5"),
            (b"transfer-encoding", b"chunked"),
            (b"upgrade", b"h2c"),
            (b"te", b"trailers"),
            (b"proxy-connection", b"x"),
            (b"content-length", b"1"),
        ],
        17,
    )
    assert out == [(b":status", b"200"), (b"content-type", b"application/json"), (b"content-length", b"17")]


@pytest.mark.parametrize(
    ("answer", "status", "code"),
    [
        (MALFORMED, 400, "bad_request"),
        (TOO_LARGE, 413, "payload_too_large"),
        (HEADERS_TOO_LARGE, 431, "bad_request"),
        (TIMED_OUT, 408, "bad_request"),
    ],
)
def test_server_error_answers_use_the_envelope(
    answer: tuple[int, list[tuple[bytes, bytes]], bytes], status: int, code: str
) -> None:
    """The server's own refusals carry the SPEC §5 envelope and x-router-error-code."""
    got_status, headers, body = answer
    assert got_status == status
    assert (b"x-router-error-code", code.encode()) in headers
    assert (b"content-type", b"application/json") in headers
    error = json.loads(body)["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]


def test_request_header_lookup() -> None:
    """``Request.header`` returns the first value of a lower-case name, or None."""
    req = Request(b"GET", b"/", [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], b"", False)
    assert req.header(b"a") == b"1"
    assert req.header(b"c") is None


@pytest.mark.parametrize(
    "bad",
    [
        {"max_body_bytes": 0},
        {"read_timeout_s": 0},
        {"idle_timeout_s": -1},
        {"h2_initial_window_bytes": 2**31},
        {"h2_max_frame_bytes": 1000},
    ],
)
def test_limits_refuse_impossible_values(bad: dict[str, float]) -> None:
    """ServerLimits refuses values that cannot work, naming the field."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        ServerLimits(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 15, 16, 4095, 4096, 70000])
def test_chunk_encoding_exact_bytes_on_both_sides_of_the_size_table(size: int) -> None:
    """A chunk is its size in hex, CRLF, the data, CRLF (RFC 9112 §7.1), below and above 4 KiB."""
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    assert encode_chunk(data) == f"{size:x}".encode() + b"\r\n" + data + b"\r\n"


@given(st.binary(min_size=1, max_size=80).map(lambda b: bytes(33 + x % 94 for x in b)))
def test_header_names_lower_cased_whatever_their_case(raw: bytes) -> None:
    """Any header name (token bytes, any case, any length) comes back lower-cased, the same for
    every spelling of it; known names and repeated ones as one object (their hash kept)."""
    assert lower_name(raw) == raw.lower()
    assert lower_name(raw.upper()) == lower_name(raw.swapcase()) == raw.lower()
    assert lower_name(b"Content-Length") is lower_name(b"CONTENT-LENGTH") is lower_name(b"content-length")


@pytest.mark.parametrize(
    "name", [b"host", b"content-length", b"x-stainless-retry-count", b"user-agent", b"te"]
)
def test_the_usual_spellings_of_a_common_name_give_one_object(name: bytes) -> None:
    """Lower, title and upper case of a common name: one object, its lower-case form, however
    full the bounded table of other names is (other tests fill it)."""
    first = lower_name(name)
    assert first == name
    assert lower_name(name.title()) is first
    assert lower_name(name.upper()) is first


def test_header_names_past_the_table_bound_still_lower_cased() -> None:
    """A client sending thousands of made-up names fills the bounded table once; every name,
    new or known, is still lower-cased after that."""
    for i in range(3000):
        assert lower_name(b"X-Made-Up-%d" % i) == b"x-made-up-%d" % i
    assert lower_name(b"X-Made-Up-Again") == b"x-made-up-again"
    assert lower_name(b"Host") == b"host"
    long_name = b"X-" + b"L" * 5000
    assert lower_name(long_name) == long_name.lower()
