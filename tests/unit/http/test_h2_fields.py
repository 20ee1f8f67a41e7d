"""Request field validation for h2 streams (RFC 9113 §8.1.1, §8.2, §8.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.http import h2_fields
from dataplane.http.h2_fields import MalformedRequest, check_trailer_fields, request_fields
from dataplane.http.wire import DIGITS_HUGE

BASE = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"api"), (b":path", b"/v1/x?a=1")]

# RFC 9113 §8.2.1 allowed name bytes (no upper case, controls, space, colon, DEL or non-ASCII).
NAME_BYTES = sorted(set(range(0x21, 0x7F)) - set(range(0x41, 0x5B)) - {0x3A})
names = st.binary(min_size=1, max_size=20).map(lambda b: bytes(NAME_BYTES[x % len(NAME_BYTES)] for x in b))
SPECIAL = {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"te"}
SPECIAL |= {b"content-length", b"host"}
values = st.binary(max_size=30).filter(
    lambda v: not (set(v) & {0, 10, 13}) and (not v or (v[0] not in b" \t" and v[-1] not in b" \t"))
)


def test_well_formed_request_is_parsed() -> None:
    """Method, path, regular fields in order, host added from :authority, content-length parsed."""
    fields = [*BASE, (b"content-type", b"application/json"), (b"content-length", b"12"), (b"x-a", b"")]
    method, path, headers, length = request_fields(fields)
    assert (method, path, length) == (b"POST", b"/v1/x?a=1", 12)
    assert headers == [
        (b"content-type", b"application/json"),
        (b"content-length", b"12"),
        (b"x-a", b""),
        (b"host", b"api"),
    ]


def test_host_equal_to_authority_is_kept_once() -> None:
    """A host equal to :authority is allowed and not duplicated; no content-length gives -1."""
    _, _, headers, length = request_fields([*BASE, (b"host", b"api"), (b"te", b"Trailers")])
    assert headers == [(b"host", b"api"), (b"te", b"Trailers")]
    assert length == -1


@pytest.mark.parametrize(
    "fields",
    [
        [(b":method", b"CONNECT"), (b":authority", b"h:443")],
        [(b":method", b"OPTIONS"), (b":scheme", b"http"), (b":path", b"*"), (b"host", b"h")],
        [(b":method", b"GET"), (b":scheme", b"x-custom"), (b":path", b"/")],
    ],
    ids=["CONNECT", "OPTIONS *", "scheme without authority"],
)
def test_special_forms_are_well_formed(fields: list[tuple[bytes, bytes]]) -> None:
    """CONNECT with :authority only, OPTIONS *, and a scheme with no authority component pass."""
    request_fields(fields)


@given(st.lists(st.tuples(names.filter(lambda n: n not in SPECIAL), values), max_size=8))
def test_valid_regular_fields_pass_unchanged(extra: list[tuple[bytes, bytes]]) -> None:
    """Any syntactically valid, non-special regular fields are passed on in order."""
    _, _, headers, _ = request_fields([*BASE, *extra])
    assert headers == [*extra, (b"host", b"api")]


@given(names, st.integers(min_value=0, max_value=19), st.sampled_from(b"ABCZ :\x00 \x7f\xff"))
def test_one_forbidden_byte_in_a_name_is_malformed(name: bytes, at: int, bad: int) -> None:
    """A name with one upper-case, control, space, colon, DEL or non-ASCII byte is malformed, every time."""
    at = min(at, len(name) - 1)
    broken = name[:at] + bytes([bad]) + name[at + 1 :]
    if broken[0] == 0x3A and broken in {b":method", b":path", b":scheme", b":authority"}:
        return
    for _ in range(2):  # the second time too: a bad name is never cached as good
        with pytest.raises(MalformedRequest):
            request_fields([*BASE, (broken, b"v")])


@pytest.mark.parametrize("value", [b"a\x00", b"\rb", b"a\nb", b" a", b"a ", b"\ta", b"a\t"])
def test_bad_value_of_a_known_name_is_malformed(value: bytes) -> None:
    """Values are checked even for names already seen valid (RFC 9113 §8.2.1)."""
    request_fields([*BASE, (b"user-agent", b"ok")])
    with pytest.raises(MalformedRequest):
        request_fields([*BASE, (b"user-agent", value)])


def test_malformed_request_carries_its_path() -> None:
    """The refusal is counted under the request's :path when it had one (empty otherwise)."""
    with pytest.raises(MalformedRequest) as info:
        request_fields([*BASE, (b"connection", b"close")])
    assert info.value.target == b"/v1/x?a=1"
    with pytest.raises(MalformedRequest) as info:
        request_fields([(b":method", b"GET"), (b"Bad", b"1")])
    assert info.value.target == b""


def test_learned_names_are_bounded() -> None:
    """A client sending ever new names cannot grow the cache of known-good names past its bound."""
    for i in range(h2_fields._PLAIN_NAMES_MAX + 100):
        request_fields([*BASE, (b"x-n%d" % i, b"1")])
    assert len(h2_fields._plain_names) <= h2_fields._PLAIN_NAMES_MAX


def test_trailers() -> None:
    """Trailers may carry regular fields, but no pseudo-header or connection-specific field."""
    check_trailer_fields([(b"x-checksum", b"1"), (b"grpc-status", b"0")])
    for bad in ([(b":path", b"/")], [(b"transfer-encoding", b"chunked")], [(b"X-A", b"1")]):
        with pytest.raises(MalformedRequest):
            check_trailer_fields(bad)


def test_cookie_crumbs_are_joined_where_the_first_was() -> None:
    """Several cookie fields become one "; "-joined field (RFC 9113 §8.2.3); one cookie stays as it was."""
    fields = [*BASE, (b"cookie", b"a=1"), (b"x-a", b"1"), (b"cookie", b"b=2")]
    assert request_fields(fields)[2] == [(b"cookie", b"a=1; b=2"), (b"x-a", b"1"), (b"host", b"api")]
    assert request_fields([*BASE, (b"cookie", b"a=1")])[2] == [(b"cookie", b"a=1"), (b"host", b"api")]


@pytest.mark.parametrize(
    ("value", "length"),
    [(b"0" * 30 + b"7", 7), (b"9" * 5000, DIGITS_HUGE), (b"123456789012345678", 123456789012345678)],
)
def test_long_content_length_values(value: bytes, length: int) -> None:
    """Leading zeros are digits; a value of thousands of digits is huge, never an int() error."""
    assert request_fields([*BASE, (b"content-length", value)])[3] == length
