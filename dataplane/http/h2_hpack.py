"""A lean HPACK decoder (RFC 7541): header block bytes in, ``[(name, value), ...]`` out.

Why not ``hpack.Decoder``: it is pure Python and, on a router, runs on every answer of an h2c
worker whose header block changes its dynamic table (a new ``content-length``, a request id):
measured here, ~28 µs per block of four fields (this one, plain: ~12 µs), as much as the rest of
the h2c hop. This decoder does the same work with flat tables and no per-field objects, and is
compiled by mypyc (scripts/mypyc_modules.txt).

The API, for both HTTP/2 sides (the h2c upstream's codec, the h2c front door)::

    decoder = Decoder(max_table_size=4096)     # the SETTINGS_HEADER_TABLE_SIZE we advertise
    fields = decoder.decode(block)             # list[tuple[bytes, bytes]], names as sent
    # any malformed block: HpackError -> the connection's COMPRESSION_ERROR (RFC 9113 §4.3)

``decoder.generation`` counts the changes of the dynamic table, so a caller may reuse the result
of a block it decoded before as long as the count did not move (the same bytes against the same
table decode to the same fields): ``BlockDecoder`` does, for both sides. After an ``HpackError`` the decoder's state is undefined: the
connection must be closed (RFC 9113 §4.3), never fed again.

What it implements: the static table (Appendix A), the dynamic table with its size updates
(§4.2, §6.3: at most ``max_table_size``, only at the start of a block) and eviction (§4.4), the
five field representations (§6), integers (§5.1, at most 5 continuation bytes) and string
literals (§5.2) with Huffman decoding (Appendix B) by a precomputed nibble automaton, which
rejects the EOS symbol and padding that is longer than 7 bits or not the EOS code's ones. The
decoded header list may be at most ``max_header_list_size`` (RFC 9113 §6.5.2: each field counts
its name, value and 32 octets).
"""

from __future__ import annotations

from typing import Final

__all__ = ["BlockDecoder", "Decoder", "HpackError"]


class HpackError(Exception):
    """A header block that is not valid HPACK (RFC 7541): a COMPRESSION_ERROR for the connection."""


# RFC 7541 Appendix A.
STATIC_TABLE: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
_STATIC_COUNT: Final = len(STATIC_TABLE)

# RFC 7541 Appendix B, the code length of each symbol (256 = EOS). The code is canonical (each
# code is the previous one + 1, shifted left to its length, in order of (length, symbol)), so
# the lengths determine the codes.
# fmt: off
_CODE_LENGTHS: Final[tuple[int, ...]] = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5,
    6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23,
    23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
    22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22,
    22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26,
    27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25,
    25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30
)
# fmt: on
_EOS: Final = 256
_MAX_INT_SHIFT: Final = 28  # integers up to 2**35: far above any legitimate length or index
_ENTRY_OVERHEAD: Final = 32  # §4.1

# The Huffman automaton: for state s (an inner node of the code tree, 0 = the root) and the next
# 4 bits n of input, _HUFFMAN[s * 16 + n] = next state | (symbol + 1) << 8 (0: none completed)
# | _FAIL (the EOS symbol was decoded). A code is at least 5 bits, so a nibble completes at most
# one symbol. _ACCEPT[s]: the string may end in state s (the root, or up to 7 bits of the EOS
# code's leading ones: padding, §5.2).
_FAIL: Final = 1 << 17


def _build_huffman() -> tuple[list[int], list[bool]]:
    order = sorted(range(len(_CODE_LENGTHS)), key=lambda sym: (_CODE_LENGTHS[sym], sym))
    # The tree: inner nodes as [child for bit 0, child for bit 1]; a child >= 0 is an inner
    # node, a child < 0 is the leaf of symbol -child - 1.
    tree: list[list[int | None]] = [[None, None]]
    ones_depth: dict[int, int] = {0: 0}  # inner nodes reached from the root by 1 bits only
    code = 0
    previous = _CODE_LENGTHS[order[0]]
    for i, sym in enumerate(order):
        length = _CODE_LENGTHS[sym]
        if i:
            code = (code + 1) << (length - previous)
        previous = length
        node = 0
        for depth in range(length - 1, -1, -1):
            bit = (code >> depth) & 1
            if depth == 0:
                tree[node][bit] = -sym - 1
                break
            child = tree[node][bit]
            if child is None:
                child = len(tree)
                tree.append([None, None])
                tree[node][bit] = child
                if bit and node in ones_depth:
                    ones_depth[child] = ones_depth[node] + 1
            assert child >= 0
            node = child
    table = [0] * (len(tree) * 16)
    for state in range(len(tree)):
        for nibble in range(16):
            node = state
            emitted = 0
            fail = 0
            for shift in (3, 2, 1, 0):
                child = tree[node][(nibble >> shift) & 1]
                assert child is not None
                if child < 0:
                    sym = -child - 1
                    if sym == _EOS:
                        fail = _FAIL
                    emitted = sym + 1
                    node = 0
                else:
                    node = child
            table[state * 16 + nibble] = node | emitted << 8 | fail
    accept = [state in ones_depth and ones_depth[state] <= 7 for state in range(len(tree))]
    return table, accept


_HUFFMAN, _ACCEPT = _build_huffman()


def huffman_decode(data: bytes) -> bytes:
    """A Huffman-coded string literal's octets (RFC 7541 §5.2, Appendix B)."""
    table = _HUFFMAN
    out = bytearray()
    state = 0
    for byte in data:
        entry = table[(state << 4) | (byte >> 4)]
        if entry & _FAIL:
            raise HpackError("EOS symbol in a Huffman-coded string")
        if entry & 0x1FF00:
            out.append(((entry >> 8) & 0x1FF) - 1)
        state = entry & 0xFF
        entry = table[(state << 4) | (byte & 0x0F)]
        if entry & _FAIL:
            raise HpackError("EOS symbol in a Huffman-coded string")
        if entry & 0x1FF00:
            out.append(((entry >> 8) & 0x1FF) - 1)
        state = entry & 0xFF
    if not _ACCEPT[state]:
        raise HpackError("bad padding of a Huffman-coded string")
    return bytes(out)


class Decoder:
    """One connection's HPACK decoding state (its dynamic table); see the module docstring."""

    __slots__ = ("_entries", "_limit", "_size", "generation", "max_header_list_size", "max_table_size")

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        # The most the peer may set the table to (our SETTINGS_HEADER_TABLE_SIZE, §4.2).
        self.max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size
        self._limit = max_table_size  # the table's size as the peer last set it
        self._entries: list[tuple[bytes, bytes]] = []  # newest last
        self._size = 0
        self.generation = 0  # + 1 whenever the dynamic table changes

    @property
    def table_size(self) -> int:
        """The dynamic table's current size (§4.1), for tests."""
        return self._size

    def decode(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The fields of one complete header block, in order; ``HpackError`` if malformed."""
        out: list[tuple[bytes, bytes]] = []
        pos = 0
        end = len(data)
        total = 0
        limit = self.max_header_list_size
        while pos < end:
            first = data[pos]
            if first & 0x80:  # indexed field (§6.1)
                index, pos = _integer(data, pos, 0x7F)
                field = self._field(index)
            elif first & 0x40:  # literal with incremental indexing (§6.2.1)
                index, pos = _integer(data, pos, 0x3F)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = _string(data, pos)
                value, pos = _string(data, pos)
                field = (name, value)
                self._insert(field)
            elif first & 0x20:  # dynamic table size update (§6.3)
                if out:
                    raise HpackError("dynamic table size update after a field")
                size, pos = _integer(data, pos, 0x1F)
                if size > self.max_table_size:
                    raise HpackError("dynamic table size update above the advertised maximum")
                self._limit = size
                self._evict(size)
                self.generation += 1
                continue
            else:  # literal without indexing / never indexed (§6.2.2, §6.2.3)
                index, pos = _integer(data, pos, 0x0F)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = _string(data, pos)
                value, pos = _string(data, pos)
                field = (name, value)
            total += len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
            if total > limit:
                raise HpackError("header list larger than the limit")
            out.append(field)
        return out

    def _field(self, index: int) -> tuple[bytes, bytes]:
        if index <= _STATIC_COUNT:
            if index == 0:
                raise HpackError("index 0")
            return STATIC_TABLE[index - 1]
        entries = self._entries
        back = index - _STATIC_COUNT  # 1 = the newest entry
        if back > len(entries):
            raise HpackError("index beyond the dynamic table")
        return entries[len(entries) - back]

    def _insert(self, field: tuple[bytes, bytes]) -> None:
        self.generation += 1
        size = len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
        if size > self._limit:  # §4.4: empties the table, is not added
            self._entries.clear()
            self._size = 0
            return
        self._evict(self._limit - size)
        self._entries.append(field)
        self._size += size

    def _evict(self, room: int) -> None:
        """Drop the oldest entries until the table is at most ``room`` octets (§4.3, §4.4)."""
        entries = self._entries
        size = self._size
        drop = 0
        while size > room:
            name, value = entries[drop]
            size -= len(name) + len(value) + _ENTRY_OVERHEAD
            drop += 1
        if drop:
            del entries[:drop]
        self._size = size


def _integer(data: bytes, pos: int, mask: int) -> tuple[int, int]:
    """The integer (§5.1) whose N-bit prefix (``mask``) starts at ``data[pos]``; and where it ends."""
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise HpackError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > _MAX_INT_SHIFT:
            raise HpackError("integer too large")


def _string(data: bytes, pos: int) -> tuple[bytes, int]:
    """The string literal (§5.2) starting at ``data[pos]``; and where it ends."""
    if pos >= len(data):
        raise HpackError("truncated field")
    huffman = data[pos] & 0x80
    length, pos = _integer(data, pos, 0x7F)
    stop = pos + length
    if stop > len(data):
        raise HpackError("string literal longer than the block")
    raw = data[pos:stop]
    return (huffman_decode(raw) if huffman else raw), stop


class BlockDecoder:
    """A ``Decoder`` that reuses what it decoded: the seam both h2 sides decode header blocks
    through (the h2c front door's requests, the h2c upstream's answers).

    A peer sends the same few header blocks over and over (fully indexed once its dynamic table
    holds them). The same bytes decode to the same fields as long as the dynamic table did not
    change in between (``Decoder.generation``), so a block is kept until the table changes, and a
    block that changes it is never kept. The lists handed out are shared: callers only read them.
    ``decode`` raises ``HpackError`` as ``Decoder.decode`` does (the connection must end).
    """

    __slots__ = ("_decoded", "_decoder", "_generation", "_last_block", "_last_fields")

    def __init__(self, max_header_list_size: int = 65536) -> None:
        self._decoder = Decoder(max_header_list_size=max_header_list_size)
        self._decoded: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._generation = 0
        # The block decoded last, when kept (the same table generation): each block arrives as a
        # new bytes object, so the dict lookup hashes it anew; an equal compare does not.
        self._last_block = b""
        self._last_fields: list[tuple[bytes, bytes]] = []

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        decoder = self._decoder
        generation = decoder.generation
        if generation == self._generation:
            if block == self._last_block:
                return self._last_fields
            cached = self._decoded.get(block)
            if cached is not None:
                self._last_block = block
                self._last_fields = cached
                return cached
        else:
            self._decoded.clear()
            self._generation = generation
            self._last_block = b""  # (an empty block decodes to no fields, table or not)
            self._last_fields = []
        headers = decoder.decode(block)
        if decoder.generation == generation and len(self._decoded) < 256:
            self._decoded[block] = headers
            self._last_block = block
            self._last_fields = headers
        return headers
