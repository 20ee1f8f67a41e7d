"""What makes an h2 request malformed (RFC 9113 §8.1.1), checked per stream.

RFC 9113 §8.1.1 makes a malformed request a *stream* error: one bad request from one client must
not drop every stream a proxy multiplexes on the same connection. The codec
(``h2_server_codec``) hands every decoded header block to the connection, which checks it here,
in one pass over the field list: field syntax (§8.2.1), connection-specific fields (§8.2.2),
pseudo-headers (§8.3, §8.3.1), content-length syntax (RFC 9110 §8.6) and Host (RFC 9110 §7.2);
cookie crumbs are joined into one field (§8.2.3). The content-length against the DATA and a
second header block without END_STREAM are checked by the connection (``http2``). Framing
errors (bad HPACK, frames on closed streams, flow control) stay connection errors in the codec.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, cast

from dataplane.http.wire import BoxedHeaders, Headers, digits_value

_REQUEST_PSEUDO: Final = frozenset({b":method", b":scheme", b":authority", b":path"})
# RFC 9113 §8.2.2; ``te`` is allowed with the value "trailers" only.
_CONNECTION_SPECIFIC: Final = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"}
)
# Regular names that need more than the syntax check (never cached as plain).
_SPECIAL: Final = _CONNECTION_SPECIFIC | {b"te", b"content-length", b"host", b"cookie"}
# RFC 9113 §8.2.1: no 0x00-0x20, no upper case (0x41-0x5a), no 0x7f-0xff, no colon past the
# first character (a pseudo-header's); an empty name is no name.
_NAME_OK: Final = re.compile(rb"[^\x00-\x20A-Z:\x7f-\xff]+").fullmatch
# RFC 9113 §8.2.1: no NUL, CR or LF anywhere in a value; no SP/HTAB at either end.
_VALUE_BAD: Final = re.compile(rb"[\x00\r\n]").search
_EDGE_WS: Final = (0x20, 0x09)
_AUTHORITY_SCHEMES: Final = frozenset({b"http", b"https"})

# Names seen valid and not special: later requests pay one set lookup for them. Bounded, so a
# client sending ever new names cannot grow it. (``cookie`` is special: its crumbs are joined.)
_plain_names: set[bytes] = {b"user-agent", b"accept", b"content-type", b"authorization"}
_PLAIN_NAMES_MAX: Final = 2048


class MalformedRequest(Exception):
    """An h2 request that RFC 9113 §8.1.1 calls malformed; ``target`` is its :path if seen."""

    def __init__(self, reason: str, target: bytes = b"") -> None:
        super().__init__(reason)
        self.reason = reason
        self.target = target


def _check_name(name: bytes) -> None:
    """Raise unless ``name`` is a syntactically valid regular field name (RFC 9113 §8.2.1)."""
    if not name:
        raise MalformedRequest("empty field name")
    if name[0] == 0x3A:  # b":"
        raise MalformedRequest(f"unknown or misplaced pseudo-header {name[:64]!r}")
    if _NAME_OK(name) is None:
        raise MalformedRequest(f"invalid field name {name[:64]!r} (RFC 9113 §8.2.1)")


def _check_value(name: bytes, value: bytes) -> None:
    if _VALUE_BAD(value) is not None or value[0] in _EDGE_WS or value[-1] in _EDGE_WS:
        raise MalformedRequest(f"invalid value of {name[:64]!r} (RFC 9113 §8.2.1)")


def _content_length(value: bytes, seen: int) -> int:
    """RFC 9110 §8.6: 1*DIGIT; repeated fields must agree."""
    if not value.isdigit():  # bytes.isdigit: ASCII digits only
        raise MalformedRequest("invalid content-length")
    length = digits_value(value)
    if seen >= 0 and seen != length:
        raise MalformedRequest("conflicting content-length fields")
    return length


def request_fields(fields: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, bytes, Headers, int]:
    """``(method, path, headers, content_length)`` of a request HEADERS block, or raise
    ``MalformedRequest``. ``headers`` has the regular fields, plus ``host`` from ``:authority``
    when the client sent none (handlers read the target host there); content_length is -1 when
    absent. Several ``cookie`` fields become one, where the first was, joined with "; " (RFC
    9113 §8.2.3: what an HTTP/1.1 hop needs)."""
    method = scheme = path = authority = host = None
    length = -1
    headers: BoxedHeaders = []
    cookies: list[bytes] | None = None
    cookie_at = 0
    try:
        for item in cast("Iterable[tuple[bytes, ...]]", fields):
            name = item[0]
            value = item[1]
            if value:
                _check_value(name, value)
            if name in _plain_names:
                headers.append(item)
                continue
            if name in _REQUEST_PSEUDO:
                # RFC 9113 §8.3: pseudo-headers come first, each at most once.
                if headers:
                    raise MalformedRequest(f"pseudo-header {name!r} after a regular field")
                if name == b":method":
                    if method is not None:
                        raise MalformedRequest("duplicated :method")
                    method = value
                elif name == b":path":
                    if path is not None:
                        raise MalformedRequest("duplicated :path")
                    path = value
                elif name == b":scheme":
                    if scheme is not None:
                        raise MalformedRequest("duplicated :scheme")
                    scheme = value
                else:
                    if authority is not None:
                        raise MalformedRequest("duplicated :authority")
                    authority = value
                continue
            if name in _SPECIAL:  # valid names all: no syntax check needed
                if name in _CONNECTION_SPECIFIC:
                    raise MalformedRequest(f"connection-specific field {name!r} (RFC 9113 §8.2.2)")
                if name == b"te":
                    if value.lower() != b"trailers":
                        raise MalformedRequest("te other than trailers (RFC 9113 §8.2.2)")
                elif name == b"content-length":
                    length = _content_length(value, length)
                elif name == b"cookie":
                    if cookies is not None:
                        cookies.append(value)
                        continue
                    cookies = [value]
                    cookie_at = len(headers)
                else:  # host: RFC 9110 §7.2, one only
                    if host is not None:
                        raise MalformedRequest("more than one host field")
                    host = value
            else:
                _check_name(name)
                if len(_plain_names) < _PLAIN_NAMES_MAX:
                    _plain_names.add(name)
            headers.append(item)
        _check_pseudo(method, scheme, path, authority, host)
    except MalformedRequest as exc:
        exc.target = path or b""
        raise
    if cookies is not None and len(cookies) > 1:
        headers[cookie_at] = (b"cookie", b"; ".join(cookies))
    if authority is not None and host is None:
        headers.append((b"host", authority))
    return method or b"", path or b"", cast(Headers, headers), length


def _check_pseudo(
    method: bytes | None,
    scheme: bytes | None,
    path: bytes | None,
    authority: bytes | None,
    host: bytes | None,
) -> None:
    """RFC 9113 §8.3.1: exactly one :method, :scheme and :path (CONNECT: :authority only)."""
    if not method:
        raise MalformedRequest("missing :method")
    if method == b"CONNECT":
        if scheme is not None or path is not None or not authority:
            raise MalformedRequest("CONNECT needs :authority and no :scheme or :path")
        return
    if not scheme:
        raise MalformedRequest("missing :scheme")
    if not path:
        raise MalformedRequest("missing or empty :path")
    if path[0] != 0x2F and not (path == b"*" and method == b"OPTIONS"):  # b"/"
        raise MalformedRequest(":path is neither absolute nor OPTIONS *")
    if scheme in _AUTHORITY_SCHEMES and authority is None and host is None:
        raise MalformedRequest("neither :authority nor host")
    # RFC 9113 §8.3.1: a host naming another entity than :authority makes it malformed.
    if authority is not None and host is not None and authority != host:
        raise MalformedRequest(":authority and host differ")


def check_trailer_fields(fields: Iterable[tuple[bytes, bytes]]) -> None:
    """Raise ``MalformedRequest`` for trailers that break RFC 9113 §8.1 / §8.2 (pseudo-headers,
    connection-specific fields, bad syntax)."""
    for name, value in fields:
        if value:
            _check_value(name, value)
        if name in _plain_names:
            continue
        _check_name(name)
        if name in _CONNECTION_SPECIFIC:
            raise MalformedRequest(f"connection-specific field {name!r} in trailers")
