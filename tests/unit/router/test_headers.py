"""Header and path handling of the proxy (RFC 9110 §7.6.1 hop-by-hop, SPEC §5 judged paths)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dataplane.router.contract.routes import DEFAULT_ROUTES, canonical_path, split_target
from dataplane.router.headers import (
    _OPTIONS_SEEN,
    _OPTIONS_SEEN_MAX,
    DROPPED,
    end_to_end,
    without_control_chars,
)


def test_hop_by_hop_and_framing_headers_are_dropped() -> None:
    """Connection, Keep-Alive, TE, Transfer-Encoding, Upgrade, Proxy-*, Host, Content-Length go."""
    headers = [
        (b"connection", b"keep-alive"),
        (b"keep-alive", b"timeout=5"),
        (b"te", b"trailers"),
        (b"transfer-encoding", b"chunked"),
        (b"upgrade", b"h2c"),
        (b"proxy-authorization", b"x"),
        (b"proxy-connection", b"close"),
        (b"host", b"router"),
        (b"content-length", b"12"),
        (b"expect", b"100-continue"),
        (b"authorization", b"Bearer k"),
        (b"content-type", b"application/json"),
        (b"x-request-id", b"abc"),
    ]
    assert end_to_end(headers) == [
        (b"authorization", b"Bearer k"),
        (b"content-type", b"application/json"),
        (b"x-request-id", b"abc"),
    ]


def test_headers_named_by_connection_are_dropped() -> None:
    """A header listed in Connection is hop-by-hop too (RFC 9110 §7.6.1)."""
    headers = [(b"connection", b"close, X-Secret ,foo"), (b"x-secret", b"1"), (b"foo", b"2"), (b"bar", b"3")]
    assert end_to_end(headers) == [(b"bar", b"3")]


def test_a_connection_value_seen_before_still_drops_what_it_names() -> None:
    """The options of a Connection value are remembered (clients repeat theirs): the second
    request with the same value, and another Connection header beside it, drop as the first."""
    for _ in range(2):
        headers = [
            (b"connection", b"Keep-Alive, X-Hop"),
            (b"x-hop", b"1"),
            (b"connection", b"content-encoding"),
            (b"content-encoding", b"gzip"),
            (b"x-end", b"2"),
        ]
        assert end_to_end(headers) == [(b"x-end", b"2")]
    assert end_to_end([(b"connection", b"Keep-Alive, X-Hop"), (b"x-end", b"3")]) == [(b"x-end", b"3")]


_NAMES = st.sampled_from([b"x-a", b"x-b", b"accept", b"keep-alive", b"close", b"content-encoding", b"te"])


def _reference(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """RFC 9110 §7.6.1 read plainly: drop what is always dropped and every name Connection lists."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name == b"connection"
        for token in value.split(b",")
    }
    return [
        (name, value)
        for name, value in headers
        if name not in DROPPED and name not in named and not name.startswith(b":")
    ]


@given(
    st.lists(
        st.one_of(
            st.tuples(_NAMES, st.binary(max_size=4)),
            st.tuples(
                st.just(b"connection"),
                st.lists(st.one_of(_NAMES, _NAMES.map(bytes.upper)), max_size=3).map(b" ,".join),
            ),
        ),
        max_size=8,
    )
)
def test_end_to_end_matches_the_rfc_whatever_connection_lists(headers: list[tuple[bytes, bytes]]) -> None:
    """Any mix of Connection headers (values remembered or not) drops exactly what the RFC says."""
    assert end_to_end(headers) == _reference(headers)
    assert len(_OPTIONS_SEEN) <= _OPTIONS_SEEN_MAX


def test_connection_values_are_remembered_within_a_bound() -> None:
    """A client sending a new Connection value per request cannot grow the router's memory:
    past the bound a value is read each time, with the same result."""
    for i in range(2 * _OPTIONS_SEEN_MAX):
        token = b"x-hop-%d" % i
        headers = [(b"connection", b"keep-alive, " + token), (token, b"1"), (b"x-end", b"2")]
        assert end_to_end(headers) == [(b"x-end", b"2")]
    assert len(_OPTIONS_SEEN) <= _OPTIONS_SEEN_MAX


def test_pseudo_headers_never_cross() -> None:
    """HTTP/2 pseudo-headers are not forwarded as fields."""
    assert end_to_end([(b":authority", b"r"), (b":path", b"/"), (b"accept", b"*/*")]) == [(b"accept", b"*/*")]


def test_control_characters_are_removed() -> None:
    """Fields whose name or value holds CR, LF or NUL cannot reach an HTTP/1.1 worker."""
    headers = [(b"x-a", b"1\r\nx-injected: 1"), (b"x-b", b"ok"), (b"x-c", b"a\x00b"), (b"x\nd", b"v")]
    assert without_control_chars(headers) == [(b"x-b", b"ok")]


def test_split_target_keeps_the_query() -> None:
    """The query string is split off with its '?' kept."""
    assert split_target(b"/v1/models?x=1") == (b"/v1/models", b"?x=1")
    assert split_target(b"/health") == (b"/health", b"")


def test_canonical_path_spellings() -> None:
    """Encoded, dotted, repeated-slash and trailing-slash spellings map to the judged path."""
    for path in (
        b"/v1/chat/completions",
        b"/v1/chat%2Fcompletions",
        b"/v1/chat%2fcompletions",
        b"//v1//chat/completions/",
        b"/v1/./chat/completions",
        b"/v1/x/../chat/completions",
        b"/v1/%63hat/completions",
        b"/v1/chat%252Fcompletions",
    ):
        assert canonical_path(path) == b"/v1/chat/completions", path
    assert canonical_path(b"/../generate") == b"/generate"


@given(
    st.sampled_from(sorted(r.path.encode() for r in DEFAULT_ROUTES if "{" not in r.path)),
    st.lists(st.sampled_from(["", ".", "%2F", "/"]), max_size=3),
)
def test_canonical_path_is_idempotent(path: bytes, noise: list[str]) -> None:
    """Canonicalising twice changes nothing, and noise around a judged path is removed."""
    spelled = path + "".join(noise).encode()
    once = canonical_path(spelled)
    assert canonical_path(once) == once


def test_a_fragment_ends_the_path() -> None:
    """``/v1/chat/completions#x`` is that judged path (the engine's URL parser drops fragments)."""
    assert split_target(b"/v1/chat/completions#x") == (b"/v1/chat/completions", b"")
    assert split_target(b"/generate#a?b=1") == (b"/generate", b"")
    assert split_target(b"/v1/completions?a=1#b") == (b"/v1/completions", b"?a=1#b")


def test_absolute_form_targets_are_routed_on_their_path() -> None:
    """RFC 9112 §3.2.2: ``http://host/p?q`` is ``/p`` with ``?q``; no path at all is ``/``."""
    assert split_target(b"http://r:8080/v1/chat/completions?a=1") == (b"/v1/chat/completions", b"?a=1")
    assert split_target(b"HTTP://r/generate#x") == (b"/generate", b"")
    assert split_target(b"http://r?a=1") == (b"/", b"?a=1")
    assert split_target(b"http://r") == (b"/", b"")
    assert split_target(b"*") == (b"*", b"")


def test_field_lines_are_listed_once_per_distinct_lines_within_a_bound() -> None:
    """An h2c worker gets a list: the same lines give the same list (read once), other lines
    their own, and the lines remembered stay bounded."""
    from dataplane.http.wire import field_list
    from dataplane.router.headers import _LISTED, _LISTED_MAX, forwarded_list

    lines = b"\r\nAccept: */*\r\nX-Trace:  a "
    first = forwarded_list(lines)
    assert first == field_list(lines) == [(b"accept", b"*/*"), (b"x-trace", b"a ")]
    assert forwarded_list(bytes(bytearray(lines))) is first  # an equal, new object
    assert forwarded_list(b"\r\nAccept: text/plain") == [(b"accept", b"text/plain")]
    assert forwarded_list(lines) is first  # the lines before the last ones: their own list
    for i in range(3 * _LISTED_MAX):
        assert forwarded_list(b"\r\nx-n: %d" % i) == [(b"x-n", b"%d" % i)]
    assert len(_LISTED) <= _LISTED_MAX
    long_lines = b"\r\nx-long: " + b"v" * 5000
    assert forwarded_list(long_lines) == [(b"x-long", b"v" * 5000)]  # listed, never kept
    assert long_lines not in _LISTED and forwarded_list(lines) == first
    listed = [(b"a", b"1")]
    assert forwarded_list(listed) is listed
