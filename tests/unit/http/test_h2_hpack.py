"""The lean HPACK decoder (``dataplane.http.h2_hpack``) against RFC 7541 and the ``hpack`` library."""

from __future__ import annotations

import contextlib

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.h2_hpack import Decoder, HpackError, huffman_decode

# RFC 7541 Appendix C.3 (requests without Huffman) and C.4 (the same with Huffman): three header
# blocks on one connection, with the dynamic table state after each.
C3 = [
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
]
C4 = [
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
]
C_FIELDS = [
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")],
    [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
        (b"cache-control", b"no-cache"),
    ],
    [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/index.html"),
        (b":authority", b"www.example.com"),
        (b"custom-key", b"custom-value"),
    ],
]
C_TABLE_SIZES = [57, 110, 164]

# RFC 7541 Appendix C.6: responses with Huffman and a 256-octet table, so entries are evicted.
C6 = [
    "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
    "4883640effc1c0bf",
    "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
]
C6_FIELDS = [
    [
        (b":status", b"302"),
        (b"cache-control", b"private"),
        (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
        (b"location", b"https://www.example.com"),
    ],
    [
        (b":status", b"307"),
        (b"cache-control", b"private"),
        (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
        (b"location", b"https://www.example.com"),
    ],
    [
        (b":status", b"200"),
        (b"cache-control", b"private"),
        (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT"),
        (b"location", b"https://www.example.com"),
        (b"content-encoding", b"gzip"),
        (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
    ],
]
C6_TABLE_SIZES = [222, 222, 215]


@pytest.mark.parametrize("blocks", [C3, C4], ids=["C.3 plain", "C.4 huffman"])
def test_rfc7541_request_examples(blocks: list[str]) -> None:
    """RFC 7541 Appendix C.3/C.4: each block decodes to its fields and leaves the RFC's table size."""
    decoder = Decoder()
    for block, fields, size in zip(blocks, C_FIELDS, C_TABLE_SIZES, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == fields
        assert decoder.table_size == size


def test_rfc7541_response_examples_evict() -> None:
    """RFC 7541 Appendix C.6: with a 256-octet table the oldest entries are evicted as the RFC says."""
    decoder = Decoder(max_table_size=256)
    for block, fields, size in zip(C6, C6_FIELDS, C6_TABLE_SIZES, strict=True):
        assert decoder.decode(bytes.fromhex(block)) == fields
        assert decoder.table_size == size


_names = st.one_of(
    st.sampled_from(
        [b":status", b"content-type", b"content-length", b"date", b"x-request-id", b"set-cookie"]
    ),
    st.binary(min_size=1, max_size=40).map(lambda b: b.lower()),
)
_values = st.one_of(st.sampled_from([b"200", b"application/json", b""]), st.binary(max_size=300))
_field = st.tuples(_names, _values, st.booleans())  # the last: sensitive (never indexed)


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(st.lists(_field, max_size=12), min_size=1, max_size=8),
    huffman=st.booleans(),
    table_size=st.sampled_from([0, 64, 256, 4096]),
    resize_to=st.none() | st.sampled_from([0, 100, 4096]),
)
def test_agrees_with_hpack(
    blocks: list[list[tuple[bytes, bytes, bool]]], huffman: bool, table_size: int, resize_to: int | None
) -> None:
    """Blocks from ``hpack.Encoder`` (Huffman on/off, table sizes, a resize midway) decode as ``hpack.Decoder`` does."""
    encoder = hpack.Encoder()
    encoder.header_table_size = table_size
    ours = Decoder(max_table_size=4096, max_header_list_size=1 << 30)
    oracle = hpack.Decoder(max_header_list_size=1 << 30)
    for i, block in enumerate(blocks):
        if resize_to is not None and i == len(blocks) // 2:
            encoder.header_table_size = resize_to
        fields = [hpack.NeverIndexedHeaderTuple(n, v) if sensitive else (n, v) for n, v, sensitive in block]
        data = encoder.encode(fields, huffman=huffman)
        expected = [(bytes(n), bytes(v)) for n, v in oracle.decode(data, raw=True)]
        assert ours.decode(data) == expected
        assert ours.table_size == oracle.header_table._current_size  # hpack keeps it private


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_huffman_round_trip(data: bytes) -> None:
    """Any octets Huffman-coded by ``hpack`` decode back to themselves."""
    coded = hpack.huffman.HuffmanEncoder(
        hpack.huffman_constants.REQUEST_CODES, hpack.huffman_constants.REQUEST_CODES_LENGTH
    ).encode(data)
    assert huffman_decode(coded) == data


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"\x80", "index 0"),
        (b"\xbe", "dynamic index on an empty table"),
        (b"\xff\x80\x80\x80\x80\x80\x01", "integer too large"),
        (b"\xff", "truncated integer"),
        (b"\x40", "truncated literal name"),
        (b"\x40\x05ab", "string longer than the block"),
        (b"\x00\x01a\x0ahello", "value longer than the block"),
        (b"\x82\x3f\xe1\x1f", "size update after a field"),
        (b"\x3f\xe2\x1f", "size update above the advertised maximum (4097)"),
        (b"\x00\x81\xff\x00", "Huffman padding of 8 bits"),
        (b"\x00\x84\xff\xff\xff\xff\x00", "the EOS symbol in a Huffman string"),
        (b"\x00\x81\x00\x00", "Huffman padding that is not the EOS prefix"),
    ],
)
def test_malformed_blocks_raise(block: bytes, why: str) -> None:
    """Every malformed block raises ``HpackError`` (the connection's COMPRESSION_ERROR), never another error."""
    with pytest.raises(HpackError):
        Decoder().decode(block)


def test_header_list_limit() -> None:
    """A block whose fields exceed ``max_header_list_size`` (names + values + 32 each) raises ``HpackError``."""
    block = b"\x00\x01a\x20" + b"v" * 32  # one field of 1 + 32 + 32 = 65 octets
    assert Decoder(max_header_list_size=65).decode(block) == [(b"a", b"v" * 32)]
    with pytest.raises(HpackError):
        Decoder(max_header_list_size=64).decode(block)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_raises_only_hpack_error(data: bytes) -> None:
    """Arbitrary bytes either decode or raise ``HpackError`` (no IndexError or other crash)."""
    with contextlib.suppress(HpackError):
        Decoder().decode(data)


def test_generation_moves_only_when_the_table_changes() -> None:
    """``generation`` stays put for fully indexed blocks and moves on an insertion or a size update."""
    decoder = Decoder()
    decoder.decode(b"\x88")  # :status 200, static
    assert decoder.generation == 0
    decoder.decode(b"\x40\x01a\x01b")  # a: b, incremental indexing
    assert decoder.generation == 1
    decoder.decode(b"\xbe")  # the entry just added
    assert decoder.generation == 1
    decoder.decode(b"\x20")  # size update to 0: the table empties
    assert decoder.generation == 2
    assert decoder.table_size == 0
