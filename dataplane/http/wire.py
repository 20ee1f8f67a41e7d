"""Pure wire helpers of the HTTP server: protocol detection, HTTP/1.1 framing, h2 header lists,
and the server's own error answers. No I/O; everything here is tested with exact bytes.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Final, Literal

from mypy_extensions import i64

# The server's own error classes live with the others in dataplane.errors: compiled
# (scripts/build_mypyc.sh), mypyc 2.4.1 drops the class-body ``status``/``default_message`` of a
# compiled subclass of an interpreted exception class (a 431 answered 400).
from dataplane.errors import (
    BadRequest,
    BodyBufferFull,
    ConnectionBodyFull,
    HeaderFieldsTooLarge,
    PayloadTooLarge,
    RequestTimeout,
    VersionNotSupported,
    error_answer,
)

# RFC 9113 §3.4: a prior-knowledge client opens with this exact 24-byte preface.
H2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

CONTINUE_100: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
LAST_CHUNK: Final = b"0\r\n\r\n"

Headers = list[tuple[bytes, bytes]]
# The same list, for code that moves its items into another list. Compiled (scripts/
# build_mypyc.sh), an item typed ``tuple[bytes, bytes]`` is unboxed when read from a list and
# boxed again, a new tuple, when appended to another; typed as a variable-length tuple, it
# stays the list's own object (``cast`` to this type and back costs a type check).
BoxedHeaders = list[tuple[bytes, ...]]


# Header names as received -> lower-cased (RFC 9110 §5.1: case-insensitive), one object per
# name: a lookup instead of ``bytes.lower()`` (a generic method call and a new object per
# header), and the object returned keeps its hash, so the set lookups that follow on both
# sides of the proxy (hop-by-hop, framing) do not hash the name again. Bounded: names past
# the bound, and long ones, are lower-cased as before (a client sending made-up names fills
# it only once).
_NAMES_MAX: Final = 512
_NAME_MAX_BYTES: Final = 64  # longer names are never kept
_COMMON_NAMES: Final = (
    b"host",
    b"content-type",
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"keep-alive",
    b"accept",
    b"accept-encoding",
    b"user-agent",
    b"authorization",
    b"x-api-key",
    b"x-request-id",
    b"expect",
    b"date",
    b"server",
    b"upgrade",
    b"te",
    b"traceparent",
    # What the official openai and anthropic Python clients (Stainless-generated) send.
    b"x-stainless-lang",
    b"x-stainless-package-version",
    b"x-stainless-os",
    b"x-stainless-arch",
    b"x-stainless-runtime",
    b"x-stainless-runtime-version",
    b"x-stainless-async",
    b"x-stainless-retry-count",
    b"x-stainless-read-timeout",
)
_NAMES: Final[dict[bytes, bytes]] = {
    raw: name
    for name in _COMMON_NAMES
    for raw in (name, name.title(), b"-".join(part.upper() for part in name.split(b"-")))
}
# The same spellings of the common names, by length: tried before ``_NAMES``. Compiled, an
# index and a compare or two, where a dict lookup first hashes the name, a new object per
# header (~450 instructions a header; this ~150).
_SPELLINGS: Final[list[tuple[tuple[bytes, bytes], ...]]] = [
    tuple((raw, name) for raw, name in _NAMES.items() if len(raw) == n)
    for n in range(max(len(name) for name in _COMMON_NAMES) + 1)
]


def lower_name(name: bytes) -> bytes:
    """``name.lower()``, the same object for the same name (see ``_NAMES``)."""
    size = len(name)
    if size < len(_SPELLINGS):
        for raw, common in _SPELLINGS[size]:
            if raw == name:
                return common
    lowered = _NAMES.get(name)
    if lowered is None:
        lowered = name.lower()
        if len(_NAMES) < _NAMES_MAX and len(name) <= _NAME_MAX_BYTES:
            lowered = _NAMES.setdefault(lowered, lowered)
            _NAMES[name] = lowered
    return lowered


# Stands for a number of more than 18 significant digits: beyond any body limit.
DIGITS_HUGE: Final = 1 << 62


def digits_value(digits: bytes) -> int:
    """The number ASCII decimal ``digits`` spell (a parser checked they are digits), or
    ``DIGITS_HUGE`` past 18 significant digits (leading zeros are still digits).

    Written by hand: compiled (scripts/build_mypyc.sh), this loop costs ~20 instructions a digit
    where ``int(digits)`` is a generic call through the ``int`` type (~800 per request)."""
    if len(digits) > 18:
        digits = digits.lstrip(b"0")
        if len(digits) > 18:
            return DIGITS_HUGE
    n = 0
    for i in range(len(digits)):
        n = n * 10 + digits[i] - 48
    return n


# -- a request head's field lines, as an HTTP/1.1 client sent them ----------------------------
#
# httptools hands a parser's headers over only through ``on_header``: a Python call, two new bytes
# objects and a tuple per header (~2k instructions each, compiled). A head llhttp has accepted
# needs none of that to be read: every field line is a token name, a colon and a value without
# CR, LF or other control bytes (RFC 9112 §5; llhttp refuses bare CR or LF, obs-fold and control
# bytes: tests/unit/http/test_field_lines.py), so a split on CRLF finds them exactly. The two
# functions below are written by hand for that reason; they never see bytes llhttp refused.


_CRLF: Final = b"\r\n"
# Compiled, ``data.split(...)`` is a lookup of the method by name on every call; this is not.
_split: Final = bytes.split


def field_list(lines: bytes) -> Headers:
    """The header list of ``lines``: field lines llhttp accepted, each led by CRLF (the form of
    ``Request.lines`` and of a head's field block). Names lower-cased, values as llhttp hands
    them to ``on_header``: leading spaces and tabs dropped, trailing ones kept."""
    headers: Headers = []
    for line in _split(lines, _CRLF):
        size = len(line)
        if size:
            # Index by index, not ``partition`` and ``lstrip``: compiled, each of those is a
            # method call by name (~1k instructions a line), each index a native read.
            colon = 0
            while colon < size and line[colon] != 0x3A:
                colon += 1
            start = colon + 1
            while start < size and (line[start] == 0x20 or line[start] == 0x09):
                start += 1
            headers.append((lower_name(line[:colon]), line[start:]))
    return headers


def _is_lower(line: bytes, name: bytes) -> bool:
    """Whether field ``line`` is named ``name`` (lower-case, without its colon), in any case."""
    size = len(name)
    if len(line) <= size or line[size] != 0x3A:
        return False
    return _has_prefix(line, name)


def _is_named(line: bytes, name: bytes, title: bytes) -> bool:
    """Whether field ``line`` is named ``name`` in any case. ``name`` in lower case and
    ``title`` as clients mostly spell it, both with the colon: the spelling the line's first
    letter points to is tried first (compiled, one native prefix compare, where the letter by
    letter test costs ~20 instructions a letter), then the colon's place, then each letter."""
    if line.startswith(name if line[0] >= 0x61 else title):
        return True
    colon = len(name) - 1
    return len(line) > colon and line[colon] == 0x3A and _spells_at(line, 0, name)


def _has_prefix(line: bytes, prefix: bytes) -> bool:
    """Whether ``line`` begins with ``prefix`` (lower-case letters, digits and "-") in any case."""
    return len(line) >= len(prefix) and _spells_at(line, 0, prefix)


def _spells_at(line: bytes, start: int, word: bytes) -> bool:
    """Whether ``line`` holds ``word`` (lower-case letters, digits and "-") at ``start``, in any
    case; ``line`` must be long enough."""
    # x | 0x20 is a lower-case letter only for a letter, a digit only for that digit, and "-"
    # only for "-" or CR (never in a field line).
    for i in range(len(word)):  # noqa: SIM110 (compiled, a loop; all() makes a generator)
        if line[start + i] | 0x20 != word[i]:
            return False
    return True


def _length_value(line: bytes) -> int:
    """The value of a Content-Length field line llhttp accepted (digits between spaces or
    tabs), or ``DIGITS_HUGE`` past 18 digits; no slice or strip made. Native 64-bit ints
    (``i64``: 18 digits fit): compiled, each step of a plain ``int`` checks for a boxed one."""
    n: i64 = 0
    digits: i64 = 0
    i: i64
    for i in range(15, len(line)):  # after "content-length:"
        c: i64 = line[i]
        if 48 <= c <= 57:
            if n or c != 48:
                digits += 1
            n = n * 10 + c - 48
            if digits > 18:
                return DIGITS_HUGE
    return n


def plain_lines(block: bytes) -> tuple[bytes, int, bool] | None:
    """A request head's field block (``field_list``'s form) as a proxy forwards it as it came:
    ``(lines, content_length, connection)``, the lines without Host, Content-Length and a
    ``keep-alive`` or ``close`` Connection (the next hop's own, RFC 9110 §7.2, RFC 9112 §6, §9.6),
    the Content-Length (-1 without one), whether a Connection was cut. None when a field would
    need more than that (every name ``dataplane.router.headers`` drops or refuses except those
    three, a Connection listing names, Transfer-Encoding, Expect, Upgrade...): read the list then.

    Each line is tested by its first letter, then against the names beginning with it; a name
    beginning with "proxy-" or "x-b" (x-body-compressed) is never plain, whatever follows, nor is
    "con" then n but Connection. A false alarm costs the header list, never a wrong forward.
    """
    # The lines are not joined again: the block is cut around the lines it loses (Host,
    # Content-Length, Connection: two or three slices).
    pieces: list[bytes] | None = None
    kept_from = 0  # the block's bytes from here on are kept so far
    at = 0  # where the line being read begins in the block (at its CRLF)
    length = -1
    connection = False
    for line in _split(block, _CRLF):
        size = len(line)
        if size == 0:
            continue  # before the block's first CRLF
        end = at + 2 + size
        first = line[0] | 0x20  # lower-cased, for a letter
        cut = False
        if first == 0x63:  # c
            if size > 3 and line[3] | 0x20 == 0x6E:  # con-n-ection
                if not _is_named(line, b"connection:", b"Connection:") or not _closes_or_keeps(line):
                    return None
                connection = cut = True
            elif _is_named(line, b"content-length:", b"Content-Length:"):
                if length >= 0:
                    return None  # llhttp refuses two; never read one of them
                length = _length_value(line)
                cut = True
            elif _is_lower(line, b"content-encoding"):
                return None
        elif first == 0x68:  # h
            if _is_named(line, b"host:", b"Host:"):
                cut = True
            elif _is_lower(line, b"http2-settings"):
                return None
        elif first == 0x74:  # t
            if _is_lower(line, b"te") or _is_lower(line, b"trailer") or _is_lower(line, b"transfer-encoding"):
                return None
        elif first == 0x78:  # x
            if _has_prefix(line, b"x-b"):
                return None
        elif first == 0x70:  # p
            if _has_prefix(line, b"proxy-"):
                return None
        elif first == 0x75:  # u
            if _is_lower(line, b"upgrade"):
                return None
        elif first == 0x6B:  # k
            if _is_lower(line, b"keep-alive"):
                return None
        elif first == 0x65 and _is_lower(line, b"expect"):  # e
            return None
        if cut:
            if pieces is None:
                pieces = []
            if at > kept_from:
                pieces.append(block[kept_from:at])
            kept_from = end
        at = end
    if pieces is None:
        return block, length, connection
    if kept_from < len(block):
        pieces.append(block[kept_from:])
    return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), length, connection


def fields_as_lines(headers: Headers) -> bytes | None:
    """``plain_lines``' lines for a header list that came without a head of bytes (an h2
    request's regular fields: lower-case names, no CR, LF or NUL in a name or value, RFC 9113
    §8.2.1, or the h2 front door refused it), so that it too is forwarded as lines; None when a
    field needs more than that. Made once per distinct header block (``http2._Checked``)."""
    plain = plain_lines(b"".join([b"\r\n%s: %s" % (name, value) for name, value in headers]))
    return None if plain is None else plain[0]


def _closes_or_keeps(line: bytes) -> bool:
    """Whether the value of Connection field ``line`` is "keep-alive" or "close" alone, in any
    case, between spaces or tabs."""
    start = 11  # after "connection:"
    end = len(line)
    while start < end and (line[start] == 0x20 or line[start] == 0x09):
        start += 1
    while end > start and (line[end - 1] == 0x20 or line[end - 1] == 0x09):
        end -= 1
    size = end - start
    if size == 10:
        return _spells_at(line, start, b"keep-alive")
    return size == 5 and _spells_at(line, start, b"close")


def classify_preface(data: bytes) -> Literal["h1", "h2", "more"]:
    """Which protocol a connection speaks, from its first bytes ("more": undecidable yet)."""
    n = min(len(data), len(H2_PREFACE))
    if data[:n] != H2_PREFACE[:n]:
        return "h1"
    return "h2" if n == len(H2_PREFACE) else "more"


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


STATUS_LINES: Final[dict[int, bytes]] = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode("ascii")) for s in HTTPStatus
}
H2_STATUS: Final[dict[int, bytes]] = {s.value: b"%d" % s.value for s in HTTPStatus}


def status_line(status: int) -> bytes:
    """The HTTP/1.1 status line for ``status`` (CRLF included)."""
    line = STATUS_LINES.get(status)
    if line is None:
        if not 100 <= status <= 999:
            raise ValueError(f"invalid HTTP status {status}")
        line = b"HTTP/1.1 %d %s\r\n" % (status, _reason(status))
    return line


def body_allowed(status: int) -> bool:
    """RFC 9110 §6.4.1: 1xx, 204 and 304 answers never carry content (nor content-length)."""
    return status >= 200 and status != 204 and status != 304


# The content-length lines and the Content-Length values seen, formatted once each (bounded
# tables: a lookup instead of formatting the number per answer or request; numbers past the
# bound are formatted as before). Lengths below ``_SMALL`` are kept by index in a list: compiled
# (scripts/build_mypyc.sh), a list read by a native int is ~10 instructions where the dict's
# lookup boxes the int into a new object first (~350 per call in all).
_SMALL: Final = 8192
_LENGTH_LINES: Final[dict[int, bytes]] = {}
_DECIMALS: Final[dict[int, bytes]] = {}
_SMALL_LENGTH_LINES: Final[list[bytes | None]] = [None] * _SMALL
_SMALL_DECIMALS: Final[list[bytes | None]] = [None] * _SMALL
_LENGTH_LINES_MAX: Final = 4096


def _formatted(small: list[bytes | None], table: dict[int, bytes], template: bytes, n: int) -> bytes:
    if 0 <= n < _SMALL:
        text = small[n]
        if text is None:
            text = small[n] = template % n
        return text
    found = table.get(n)
    if found is None:
        found = template % n
        if len(table) < _LENGTH_LINES_MAX:
            table[n] = found
    return found


def length_line(n: int) -> bytes:
    """The header line ``content-length: n`` with its CRLF."""
    return _formatted(_SMALL_LENGTH_LINES, _LENGTH_LINES, b"content-length: %d\r\n", n)


def decimal(n: int) -> bytes:
    """``n`` in ASCII decimal digits."""
    return _formatted(_SMALL_DECIMALS, _DECIMALS, b"%d", n)


# Headers the server itself decides on HTTP/1.1 (RFC 9112 §6, §9.6): the handler's are dropped.
_H1_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})

# RFC 9113 §8.2.2: connection-specific fields must not appear in HTTP/2; content-length is
# recomputed by the server for complete answers and meaningless for streamed ones.
_H2_DROPPED: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"content-length",
    }
)


def encode_h1_head(
    status: int,
    headers: Headers,
    content_length: int | None,
    chunked: bool,
    close: bool,
    body: bytes = b"",
) -> tuple[bytes, bool]:
    """Status line + headers + blank line (then ``body``, if given: one buffer for a complete
    answer), and whether the connection closes after the answer.

    ``content_length`` None and ``chunked`` False means no framing header at all (bodyless
    statuses, or an HTTP/1.0 answer delimited by closing). A handler header ``connection:
    close`` forces ``close``.
    """
    # The pieces, then one join: compiled (scripts/build_mypyc.sh), each ``out += ...`` of a
    # concatenation was a generic in-place add and a new bytes object per piece.
    parts = [STATUS_LINES.get(status) or status_line(status)]
    for name, value in headers:
        if name in _H1_FRAMING:
            if name == b"connection" and b"close" in value.lower():
                close = True
            continue
        parts.append(name)
        parts.append(b": ")
        parts.append(value)
        parts.append(_CRLF)
    if content_length is not None:
        parts.append(length_line(content_length))
    elif chunked:
        parts.append(b"transfer-encoding: chunked\r\n")
    parts.append(b"connection: close\r\n\r\n" if close else _CRLF)
    if body:
        parts.append(body)
    return b"".join(parts), close


# The chunk-size lines of chunks up to 4 KiB (SSE events are a few hundred bytes): a lookup
# and one join per chunk cost less than %-formatting the size and the data together.
_SIZE_LINES: Final = [b"%x\r\n" % n for n in range(4096)]


def encode_chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (RFC 9112 §7.1) carrying ``data`` (non-empty)."""
    n = len(data)
    # %-formatted bytes: compiled, one allocation (``CPyBytes_Build``), no tuple, no buffers.
    return b"%s%s\r\n" % (_SIZE_LINES[n] if n < 4096 else b"%x\r\n" % n, data)


def h2_response_headers(status: int, headers: Headers, content_length: int | None) -> Headers:
    """The HEADERS list of an h2 answer: ``:status`` first, connection-specific fields dropped."""
    code = H2_STATUS.get(status)
    if code is None:
        if not 100 <= status <= 999:
            raise ValueError(f"invalid HTTP status {status}")
        code = b"%d" % status
    out: Headers = [(b":status", code)]
    for item in headers:
        if item[0] not in _H2_DROPPED:
            out.append(item)
    if content_length is not None:
        out.append((b"content-length", b"%d" % content_length))
    return out


# The server's own error answers (dataplane.errors renders every one).
MALFORMED: Final = error_answer(BadRequest("malformed HTTP request"))
TOO_LARGE: Final = error_answer(PayloadTooLarge())
HEADERS_TOO_LARGE: Final = error_answer(HeaderFieldsTooLarge())
TIMED_OUT: Final = error_answer(RequestTimeout())
# RFC 9112 §3: a request-line needs an HTTP-version; without one (HTTP/0.9) it is invalid,
# and "recipients of an invalid request-line SHOULD respond with ... 400 (Bad Request)".
NO_VERSION: Final = error_answer(BadRequest("request line without HTTP version (HTTP/0.9 is not served)"))
VERSION_NOT_SUPPORTED: Final = error_answer(VersionNotSupported())
BUFFER_FULL: Final = error_answer(BodyBufferFull())
CONNECTION_BUFFER_FULL: Final = error_answer(ConnectionBodyFull())
UPGRADE_WITH_BODY: Final = error_answer(
    BadRequest("Upgrade is not supported on a request with a body (for h2c use prior knowledge)")
)
