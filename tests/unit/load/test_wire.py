"""The LoadStat frame codec of SPEC §7, pinned to SGLang's bytes."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.load.wire import LOAD_TOPIC, LoadStat, WireError, decode_frame, encode_frame, encode_stat
from tests.fakes.sglang_engine.load_publisher import GOLDEN_SGLANG_0_5_23

# SGLang's engine: msgspec.msgpack.Encoder().encode(LoadStat(1, 2, 3, 4, 0)) (reference C.1).
GOLDEN_WITH_RANK = bytes.fromhex("96a84c6f6164537461740102030400")
GOLDEN_WITHOUT_RANK = bytes.fromhex("96a84c6f61645374617401020304c0")
# SGLang 0.5.23's real publisher's bytes (tests/fakes/sglang_engine/load_publisher.py: the golden
# capture, and tests/unit/sglang_oracle/test_load_publisher.py, which captures it again).
STAT_SGLANG_0_5_23 = LoadStat(3, 2, 1500, 262144, 0, 700, 2200, 256, 123456, 78901)
_raw = msgspec.msgpack.Encoder()


def test_golden_bytes_with_rank() -> None:
    """A stat with attn_dp_rank encodes to exactly the engine's bytes."""
    assert encode_stat(LoadStat(1, 2, 3, 4, 0)) == GOLDEN_WITH_RANK


def test_golden_bytes_without_rank() -> None:
    """An unset rank is a trailing msgpack nil, keeping the 6-element positional shape."""
    assert encode_stat(LoadStat(1, 2, 3, 4)) == GOLDEN_WITHOUT_RANK


def test_frame_is_topic_seq_payload() -> None:
    """A frame is [b"load", 8-byte big-endian seq, payload]."""
    assert encode_frame(258, LoadStat(1, 2, 3, 4, 0)) == (
        b"load",
        b"\x00\x00\x00\x00\x00\x00\x01\x02",
        GOLDEN_WITH_RANK,
    )


def test_decode_golden_with_and_without_rank() -> None:
    """The engine's golden frames decode to the stat they carry, nil rank included."""
    seq0 = (0).to_bytes(8, "big")
    assert decode_frame([b"load", seq0, GOLDEN_WITH_RANK]) == (0, LoadStat(1, 2, 3, 4, 0))
    assert decode_frame((b"load", seq0, GOLDEN_WITHOUT_RANK)) == (0, LoadStat(1, 2, 3, 4, None))


def test_golden_sglang_0_5_23_frame_decodes_and_encodes_back() -> None:
    """The 11-position frame SGLang 0.5.23's publisher sent decodes to every count, and our encoder
    writes exactly those bytes for that stat."""
    assert decode_frame([b"load", bytes(8), GOLDEN_SGLANG_0_5_23]) == (0, STAT_SGLANG_0_5_23)
    assert encode_stat(STAT_SGLANG_0_5_23) == GOLDEN_SGLANG_0_5_23
    assert STAT_SGLANG_0_5_23.extended and not LoadStat(1, 2, 3, 4, 0).extended


def test_six_position_frames_read_the_appended_counts_as_unknown() -> None:
    """An older engine's frame is valid: the five appended counts are None, and it encodes back to six."""
    _, stat = decode_frame([b"load", bytes(8), GOLDEN_WITH_RANK])
    assert (stat.num_waiting_uncached_tokens, stat.num_total_tokens, stat.max_running_requests) == (None,) * 3
    assert (stat.total_prefill_uncached_tokens, stat.total_prefill_busy_us) == (None, None)
    assert encode_stat(stat) == GOLDEN_WITH_RANK


def test_decode_tolerates_extra_trailing_elements() -> None:
    """A later engine revision's 12th element is ignored."""
    payload = _raw.encode(["LoadStat", 5, 6, 7, 8, 1, 9, 10, 11, 12, 13, 99])
    expected = LoadStat(5, 6, 7, 8, 1, 9, 10, 11, 12, 13)
    assert decode_frame([b"load", (3).to_bytes(8, "big"), payload]) == (3, expected)


@pytest.mark.parametrize(
    "tail",
    [["x", [1, 2], {"k": 1}, None], [5, -6, 7, 8, 9], [None, 1.5], [2**64 - 1]],
    ids=["strings and containers", "a negative count", "a float", "past the count limit"],
)
def test_positions_past_six_that_are_not_sglangs_counts_leave_them_unknown(tail: list[object]) -> None:
    """Another revision's trailing elements (SPEC §7: accepted whatever they hold) at positions 7-11:
    the frame is valid, its six original positions read, the appended counts None."""
    payload = _raw.encode(["LoadStat", 5, 6, 7, 8, 1, *tail])
    assert decode_frame([b"load", (3).to_bytes(8, "big"), payload]) == (3, LoadStat(5, 6, 7, 8, 1))


def test_decode_tolerates_trailing_elements_of_a_few_kib() -> None:
    """Extra trailing elements are valid whatever they hold (SPEC §7), up to the ingest's frame limit."""
    payload = _raw.encode(["LoadStat", 5, 6, 7, 8, 1, 9, 10, 11, 12, 13, "x" * 4000, list(range(2000))])
    assert len(payload) > 4096
    expected = LoadStat(5, 6, 7, 8, 1, 9, 10, 11, 12, 13)
    assert decode_frame([b"load", (3).to_bytes(8, "big"), payload]) == (3, expected)


def test_decode_tolerates_missing_rank_element() -> None:
    """A five-element stat (older shape, no rank) reads as rank None."""
    payload = _raw.encode(["LoadStat", 5, 6, 7, 8])
    assert decode_frame([b"load", (3).to_bytes(8, "big"), payload])[1].attn_dp_rank is None


@given(
    seq=st.integers(0, 2**63 - 1),
    counts=st.tuples(*[st.integers(0, 2**52 - 1)] * 4),
    rank=st.none() | st.integers(0, 1024),
    appended=st.none() | st.tuples(*[st.integers(0, 2**52 - 1)] * 5),
)
def test_round_trip(
    seq: int, counts: tuple[int, int, int, int], rank: int | None, appended: tuple[int, ...] | None
) -> None:
    """decode_frame inverts encode_frame for every valid stat, six or eleven positions."""
    stat = LoadStat(*counts, rank, *(appended or ()))
    assert decode_frame(encode_frame(seq, stat)) == (seq, stat)


_SEQ = (1).to_bytes(8, "big")
MALFORMED: list[tuple[str, list[bytes]]] = [
    ("two frames", [b"load", _SEQ]),
    ("four frames", [b"load", _SEQ, GOLDEN_WITH_RANK, b""]),
    ("wrong topic", [b"kv", _SEQ, GOLDEN_WITH_RANK]),
    ("short seq", [b"load", b"\x00\x01", GOLDEN_WITH_RANK]),
    ("long seq", [b"load", b"\x00" * 9, GOLDEN_WITH_RANK]),
    ("negative seq", [b"load", (-1).to_bytes(8, "big", signed=True), GOLDEN_WITH_RANK]),
    ("oversized payload", [b"load", _SEQ, _raw.encode(["LoadStat", 1, 2, 3, 4, 0, b"x" * 65536])]),
    (
        "nested past the recursion limit",
        [b"load", _SEQ, b"\x97" + GOLDEN_WITH_RANK[1:] + b"\x91" * 1008 + b"\x00"],
    ),
    ("nested far past it", [b"load", _SEQ, b"\x97" + GOLDEN_WITH_RANK[1:] + b"\x81\x00" * 30_000 + b"\x00"]),
    ("empty payload", [b"load", _SEQ, b""]),
    ("not msgpack", [b"load", _SEQ, b"\xc1garbage"]),
    ("wrong tag", [b"load", _SEQ, _raw.encode(["KvStat", 1, 2, 3, 4, 0])]),
    ("untagged", [b"load", _SEQ, _raw.encode([1, 2, 3, 4, 0])]),
    ("a map", [b"load", _SEQ, _raw.encode({"num_running_reqs": 1})]),
    ("too few counts", [b"load", _SEQ, _raw.encode(["LoadStat", 1, 2, 3])]),
    ("string count", [b"load", _SEQ, _raw.encode(["LoadStat", "1", 2, 3, 4, 0])]),
    ("float count", [b"load", _SEQ, _raw.encode(["LoadStat", 1.5, 2, 3, 4, 0])]),
    ("string rank", [b"load", _SEQ, _raw.encode(["LoadStat", 1, 2, 3, 4, "0"])]),
    ("negative count", [b"load", _SEQ, _raw.encode(["LoadStat", 1, -2, 3, 4, 0])]),
    (
        "negative count behind odd trailing elements",
        [b"load", _SEQ, _raw.encode(["LoadStat", 1, -2, 3, 4, 0, "x"])],
    ),
    ("count beyond int64 sums", [b"load", _SEQ, _raw.encode(["LoadStat", 1, 2, 2**64 - 1, 4, 0])]),
    ("trailing bytes", [b"load", _SEQ, GOLDEN_WITH_RANK + b"\x00"]),
]


@pytest.mark.parametrize(("kind", "frames"), MALFORMED, ids=[k for k, _ in MALFORMED])
def test_malformed_frames_raise_wire_error(kind: str, frames: list[bytes]) -> None:
    """Every malformed kind raises WireError (never another exception type)."""
    with pytest.raises(WireError):
        decode_frame(frames)


def test_topic_constant_matches_sglang() -> None:
    """The topic is SGLang's LOAD_TOPIC, "load"."""
    assert LOAD_TOPIC == b"load"


@given(payload=st.binary(max_size=64), seq=st.binary(min_size=8, max_size=8))
def test_arbitrary_payloads_decode_or_raise_wire_error(payload: bytes, seq: bytes) -> None:
    """Whatever bytes arrive, decoding yields a stat or WireError, never another exception."""
    with contextlib.suppress(WireError):
        decode_frame([b"load", seq, payload])
