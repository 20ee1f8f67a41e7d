"""Header handling shared by the front door and both upstreams (pure).

A proxy must not forward hop-by-hop headers (RFC 9110 §7.6.1): ``Connection`` and every header it
names, ``Keep-Alive``, ``TE``, ``Transfer-Encoding``, ``Upgrade``, ``Proxy-Connection`` and the
``Proxy-*`` authentication pair. Framing (``Content-Length``/``Transfer-Encoding``, RFC 9112 §6)
is recomputed by whoever writes the next hop, and ``Host`` names the next hop's authority, so
those are dropped too. HTTP/2 pseudo-headers (``:authority`` …) never cross to an HTTP/1.1 hop.
"""

from __future__ import annotations

from typing import Final, cast

from dataplane.errors import BadRequest
from dataplane.http.wire import BoxedHeaders, field_list

Headers = list[tuple[bytes, bytes]]
# A request's end-to-end headers for the next hop: the list ``end_to_end`` keeps, or the field
# lines an HTTP/1.1 client sent as it sent them (``Request.lines``: each led by CRLF), when the
# front door found none a proxy drops or refuses but Host, Content-Length and a keep-alive or
# close Connection, which it cut (``dataplane.http.wire.plain_lines``). An HTTP/1.1 pool writes
# such lines as they are; an h2c one lists them (``forwarded_list``).
Forwarded = Headers | bytes


# Field lines -> their list: a client sends the same lines with each request, and a lookup
# (the lines hashed once) costs a fraction of reading them (``field_list``, ~600 instructions a
# line). Bounded: a client cycling its lines only makes it start over.
_LISTED: Final[dict[bytes, Headers]] = {}
_LISTED_MAX: Final = 64
_LISTED_LINES_MAX_BYTES: Final = 4096


class _LastListed:
    """The lines listed last and their list, as one pair (one store: a thread reading it sees the
    old pair or the new one). The lines of each request are a new bytes object, hashed anew by
    the lookup in ``_LISTED`` (~500 instructions compiled); comparing them with the last ones
    costs a tenth of that, and consecutive requests mostly carry the same lines."""

    __slots__ = ("pair",)

    def __init__(self) -> None:
        self.pair: tuple[bytes, Headers] = (b"", [])


_last_listed: Final = _LastListed()


def forwarded_list(headers: Forwarded) -> Headers:
    """``headers`` as a list (names lower-cased). Lines read before give the same list: the
    caller never changes it."""
    if not isinstance(headers, bytes):
        return headers
    last = _last_listed.pair
    if headers == last[0]:
        return last[1]
    listed = _LISTED.get(headers)
    if listed is None:
        listed = field_list(headers)
        if len(headers) > _LISTED_LINES_MAX_BYTES:
            return listed
        if len(_LISTED) >= _LISTED_MAX:
            _LISTED.clear()
        _LISTED[headers] = listed
    _last_listed.pair = (headers, listed)
    return listed


# Always dropped when crossing the proxy (lower-case; names arrive lower-cased from both
# httptools callers and h2).
HOP_BY_HOP: Final[frozenset[bytes]] = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"trailer",
        b"http2-settings",
    }
)
# Recomputed by the writer of the next hop; ``expect`` was answered by the front door (the
# whole body is read before forwarding, so the worker must not be asked to send 100 Continue).
FRAMING: Final[frozenset[bytes]] = frozenset({b"content-length", b"host", b"expect"})
DROPPED: Final[frozenset[bytes]] = HOP_BY_HOP | FRAMING
# A body the engine decodes before reading it (SPEC §5.1: Content-Encoding, SGLang's
# x-body-compressed): a judged route cannot read it as the engine will, an unjudged one
# forwards these headers untouched.
CODED: Final[frozenset[bytes]] = frozenset({b"content-encoding", b"x-body-compressed"})
_NOTED: Final[frozenset[bytes]] = DROPPED | CODED


def connection_options(value: bytes) -> frozenset[bytes]:
    """The header names one ``Connection`` value lists (RFC 9110 §7.6.1), lower-cased."""
    return frozenset(t.strip().lower() for t in value.split(b",") if t.strip())


# The options of the Connection values seen, less the names dropped anyway (clients send
# "keep-alive" or "close" on nearly every request: reading a value costs ~4k instructions
# compiled, a lookup ~200). Bounded: past the cap a value is read every time it comes.
_OPTIONS_SEEN: Final[dict[bytes, frozenset[bytes]]] = {}
_OPTIONS_SEEN_MAX: Final = 64
_OPTIONS_VALUE_MAX_BYTES: Final = 64


def _options_to_drop(value: bytes) -> frozenset[bytes]:
    """The names a Connection value lists that ``end_to_end`` would otherwise keep."""
    names = _OPTIONS_SEEN.get(value)
    if names is None:
        names = connection_options(value) - DROPPED
        if len(_OPTIONS_SEEN) < _OPTIONS_SEEN_MAX and len(value) <= _OPTIONS_VALUE_MAX_BYTES:
            _OPTIONS_SEEN[value] = names
    return names


def end_to_end(headers: Headers, *, judged: bool = False) -> Headers:
    """``headers`` without hop-by-hop, framing, Host and pseudo-headers, order kept.

    ``judged``: the body is about to be judged (SPEC §5.1), so a coded body is refused
    (``BadRequest`` naming the header) rather than forwarded.

    Names must already be lower-case. One pass with one set lookup per header, keeping the
    caller's tuples (a request-path hot spot: this loop costs a third of a comprehension plus a
    second scan for ``Connection``; the coded-body check rides on it for the same reason); a
    second pass only when a ``Connection`` header names one not dropped anyway.
    """
    kept: BoxedHeaders = []
    listed: frozenset[bytes] | None = None  # what Connection headers name, beyond DROPPED
    for item in cast(BoxedHeaders, headers):
        name = item[0]
        if name in _NOTED:
            if name in CODED:
                if judged:
                    raise BadRequest(
                        f"{name.decode()} request bodies are not accepted on this route: the router "
                        "must read the body exactly as the engine will (send it uncompressed)"
                    )
                kept.append(item)
            elif name == b"connection":
                options = _options_to_drop(item[1])
                listed = options if listed is None else listed | options
        elif not name or name[0] != 0x3A:  # not a pseudo-header (":path"); no slice made
            kept.append(item)
    if listed:
        kept = [item for item in kept if item[0] not in listed]
    return cast(Headers, kept)


# The client's credentials for the router (``clients``): not for the worker's eyes.
CREDENTIALS: Final[frozenset[bytes]] = frozenset({b"authorization", b"x-api-key"})


def without_credentials(headers: Headers) -> Headers:
    """``headers`` without ``Authorization`` and ``x-api-key`` (the router checked them, or
    sends its own to the worker)."""
    return cast(Headers, [item for item in cast(BoxedHeaders, headers) if item[0] not in CREDENTIALS])


def without_control_chars(headers: Headers) -> Headers:
    """``headers`` without fields whose name or value holds CR, LF or NUL.

    HTTP/1.1 parsing cannot produce such fields, but HPACK can carry them (RFC 9113 §8.2.1 says
    they are malformed): a request that arrived over h2 is cleaned before its headers are
    written to an HTTP/1.1 worker, so no field can smuggle a header line.
    """
    return [
        (n, v)
        for n, v in headers
        if b"\r" not in v and b"\n" not in v and b"\0" not in v and b"\r" not in n and b"\n" not in n
    ]
