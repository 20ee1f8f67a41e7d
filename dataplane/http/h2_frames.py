"""HTTP/2 wire constants and stateless encoding pieces (RFC 9113, RFC 7541), shared by the h2c
server (``dataplane.http``) and the h2c upstream client (``dataplane.router.upstream.h2c``).

Frame layout (RFC 9113 §4.1), frame types, flags, error codes and SETTINGS identifiers, plus the
HPACK field encoding both sides use for the header blocks they send: "literal without
indexing" with static-table names (RFC 7541 §6.2.2) and plain (non-Huffman) string literals
(§5.2). Encoding this way keeps no encoder state, so nothing has to stay in step with the
peer's decoder.
"""

from __future__ import annotations

from typing import Final

# ``Final``: compiled (scripts/build_mypyc.sh), a Final int is a constant in every module that
# imports it; any other module global is a dictionary lookup at each use.
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Frame types (RFC 9113 §6).
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9
# Flags.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20
# Error codes (RFC 9113 §7).
NO_ERROR: Final = 0
PROTOCOL_ERROR: Final = 1
INTERNAL_ERROR: Final = 2
FLOW_CONTROL_ERROR: Final = 3
STREAM_CLOSED: Final = 5
FRAME_SIZE_ERROR: Final = 6
REFUSED_STREAM: Final = 7
CANCEL: Final = 8
COMPRESSION_ERROR: Final = 9
ENHANCE_YOUR_CALM: Final = 11
# SETTINGS identifiers (§6.5.2).
S_HEADER_TABLE_SIZE: Final = 1
S_ENABLE_PUSH: Final = 2
S_MAX_CONCURRENT_STREAMS: Final = 3
S_INITIAL_WINDOW_SIZE: Final = 4
S_MAX_FRAME_SIZE: Final = 5
S_MAX_HEADER_LIST_SIZE: Final = 6
MAX_WINDOW: Final = 2**31 - 1
DEFAULT_WINDOW: Final = 65535
MAX_STREAM_ID: Final = 2**31 - 1
RECV_FRAME_SIZE: Final = 1 << 16

# RFC 7541 Appendix A: static-table indices of names we send often.
STATIC_INDEX: Final[dict[bytes, int]] = {
    b":authority": 1,
    b":path": 4,
    b"accept-charset": 15,
    b"accept-encoding": 16,
    b"accept-language": 17,
    b"accept": 19,
    b"authorization": 23,
    b"cache-control": 24,
    b"content-encoding": 26,
    b"content-length": 28,
    b"content-type": 31,
    b"cookie": 32,
    b"user-agent": 58,
}
# Prefix of "literal without indexing, indexed name" (RFC 7541 §6.2.2: 4-bit index prefix).
STATIC_NAMES: Final[dict[bytes, bytes]] = {}
METHOD_FIELDS: Final = {b"GET": b"\x82", b"POST": b"\x83"}  # fully indexed :method (static 2, 3)
SCHEME_HTTP: Final = b"\x86"  # :scheme: http (static 6)


class H2ProtocolError(Exception):
    """The peer broke RFC 9113; ``code`` is the GOAWAY error code to report."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def header_block(stream_id: int, flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS frame: its padding and priority fields removed
    (RFC 9113 §6.2); raises ``H2ProtocolError`` for a HEADERS frame that cannot be one."""
    if not stream_id:
        raise H2ProtocolError("HEADERS on stream 0")
    start = 0
    stop = len(payload)
    if flags & PADDED:
        if not payload:
            raise H2ProtocolError("padded HEADERS without a pad length")
        start = 1
        stop -= payload[0]
    if flags & PRIORITY_FLAG:
        start += 5
    if start > stop:
        raise H2ProtocolError("padding exceeds the HEADERS payload")
    return payload[start:stop]


# ``bytes((n,))`` for every octet: an index instead of building a tuple and calling ``bytes``
# (compiled, the call is a generic one), for the one-octet lengths of short string literals.
OCTETS: Final[tuple[bytes, ...]] = tuple(bytes((n,)) for n in range(256))


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK integer (RFC 7541 §5.1) with ``first`` holding the representation's flag bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(value: bytes) -> bytes:
    """HPACK string literal, not Huffman-coded (RFC 7541 §5.2)."""
    n = len(value)
    return (OCTETS[n] if n < 127 else hpack_int(n, 7, 0)) + value


STATIC_NAMES.update({name: hpack_int(index, 4, 0) for name, index in STATIC_INDEX.items()})
CONTENT_LENGTH_FIELD: Final = STATIC_NAMES[b"content-length"]
_LENGTH_FIELDS: Final[dict[int, bytes]] = {}
_LENGTH_FIELDS_MAX: Final = 1024


def content_length_field(content_length: int) -> bytes:
    """``content-length: N`` (literal without indexing, static name: RFC 7541 §6.2.2), cached
    by N: requests and answers repeat a handful of lengths."""
    field = _LENGTH_FIELDS.get(content_length)
    if field is None:
        digits = b"%d" % content_length
        field = CONTENT_LENGTH_FIELD + OCTETS[len(digits)] + digits
        if len(_LENGTH_FIELDS) >= _LENGTH_FIELDS_MAX:
            _LENGTH_FIELDS.clear()
        _LENGTH_FIELDS[content_length] = field
    return field


def same_fields(fields: list[tuple[bytes, bytes]], last: list[tuple[bytes, bytes]]) -> bool:
    """Whether two field lists are equal, item by item: the test for reusing the header block
    of the last message (its values are new bytes objects each time, so a table lookup would
    hash every one of them anew; the compare alone costs less)."""
    n = len(fields)
    if n != len(last):
        return False
    for i in range(n):
        # Compiled, a field is read as two references (no tuple: ``is`` on it would box one).
        name, value = fields[i]
        seen_name, seen_value = last[i]
        if name != seen_name or value != seen_value:
            return False
    return True


def encode_field(name: bytes, value: bytes) -> bytes:
    """One field as "literal without indexing" (RFC 7541 §6.2.2): leaves no decoder state."""
    prefix = STATIC_NAMES.get(name)
    if prefix is not None:
        return prefix + hpack_str(value)
    return b"\x00" + hpack_str(name) + hpack_str(value)


class FramePrefixes:
    """The first five octets of frame headers of one type and flags (RFC 9113 §4.1: length,
    type, flags; the stream id follows), made once per length below ``lengths``. Compiled
    (scripts/build_mypyc.sh), ``int.to_bytes`` makes a boxed integer first for all but the
    smallest ones: ~250 instructions a header, where a table read is a list read."""

    __slots__ = ("_kind_flags", "_made")

    def __init__(self, kind: int, flags: int, lengths: int = 4096) -> None:
        self._kind_flags = kind << 8 | flags
        self._made: list[bytes | None] = [None] * lengths

    def of(self, length: int) -> bytes:
        made = self._made
        if length < len(made):
            prefix = made[length]
            if prefix is None:
                prefix = made[length] = (length << 16 | self._kind_flags).to_bytes(5, "big")
            return prefix
        return (length << 16 | self._kind_flags).to_bytes(5, "big")


# The frame headers both h2 sides write most (the server's answers, the upstream's requests),
# but their stream id.
HEADERS_PREFIXES: Final = FramePrefixes(HEADERS, END_HEADERS)
HEADERS_END_PREFIXES: Final = FramePrefixes(HEADERS, END_HEADERS | END_STREAM)
DATA_PREFIXES: Final = FramePrefixes(DATA, 0)
DATA_END_PREFIXES: Final = FramePrefixes(DATA, END_STREAM)


def frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    """One frame: 9-byte header (RFC 9113 §4.1) + payload (copied once, from a view too)."""
    # The header as one 72-bit integer: length << 48 | type << 40 | flags << 32 | stream id.
    head = (len(payload) << 48) | (kind << 40) | (flags << 32) | stream_id
    return head.to_bytes(9, "big") + payload
