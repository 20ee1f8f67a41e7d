"""The ``LoadStat`` frame codec of SPEC §7, byte for byte as SGLang's engine publishes it.

Frame: ``[b"load", seq as 8-byte big-endian signed int, msgpack(LoadStat)]`` where
``LoadStat`` is an ``array_like``, tagged msgspec Struct of eleven positions (SGLang 0.5.23):
``["LoadStat", num_running_reqs, num_waiting_reqs, num_tokens, max_total_num_tokens, attn_dp_rank,
num_waiting_uncached_tokens, num_total_tokens, max_running_requests, total_prefill_uncached_tokens,
total_prefill_busy_us]``. The last five were appended to the original six: a six-position frame of
an older engine is valid and reads them as None (unknown), and encodes back to those six.

A shared leaf: stdlib + msgspec only, imported by the engine side (publisher) and the
control plane (consumer). ``array_like`` structs are append-only: never reorder fields.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

LOAD_TOPIC = b"load"
SEQ_BYTES = 8
# A LoadStat is ~20 bytes, but extra trailing elements are valid (SPEC §7: a later
# revision's fields, whatever they hold), so the bound is the ingest's frame limit
# (``subscriber.MAX_FRAME_BYTES``), not the size of today's fields: 1 KiB refused a valid
# frame whose later field was a few KiB. Anything larger is refused before decoding.
MAX_PAYLOAD_BYTES = 64 * 1024


# Counts are never negative, and below 2**52 so that a worker's sums over up to 1024 ranks
# fit the int64 fields of WatchLoads (msgpack carries up to 2**64 - 1). Checked by the
# decoder itself (in C, no per-field check on the ingest's hot path); constructing and
# encoding are not validated.
MAX_COUNT = 2**52
_Count = Annotated[int, msgspec.Meta(ge=0, lt=MAX_COUNT)]


class LoadStat(msgspec.Struct, array_like=True, gc=False, tag=True, frozen=True):
    """One scheduler's load; ``attn_dp_rank`` may be nil (SPEC §7). Append-only.

    The appended counts (SGLang's ``load_publisher.LoadStat``): ``num_waiting_uncached_tokens``
    (prompt tokens awaiting prefill, cached prefixes excluded), ``num_total_tokens`` (KV tokens in
    use plus every queued request's tokens), ``max_running_requests`` (the running-request limit),
    ``total_prefill_uncached_tokens`` and ``total_prefill_busy_us`` (cumulative since the engine
    started: their deltas give the prefill rate). None: the engine did not send it.
    """

    num_running_reqs: _Count
    num_waiting_reqs: _Count
    num_tokens: _Count
    max_total_num_tokens: _Count
    attn_dp_rank: int | None = None
    num_waiting_uncached_tokens: _Count | None = None
    num_total_tokens: _Count | None = None
    max_running_requests: _Count | None = None
    total_prefill_uncached_tokens: _Count | None = None
    total_prefill_busy_us: _Count | None = None

    @property
    def extended(self) -> bool:
        """Whether it carries the appended counts (an 11-position frame)."""
        return self.num_waiting_uncached_tokens is not None


class _LoadStatV1(msgspec.Struct, array_like=True, gc=False, tag="LoadStat", frozen=True):
    """The original six positions: how a stat without the appended counts is encoded."""

    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    max_total_num_tokens: int
    attn_dp_rank: int | None = None


class WireError(ValueError):
    """A frame that is not a well-formed load frame (counted and dropped by consumers)."""


class _LoadStatPrefix(msgspec.Struct, array_like=True, gc=False, tag="LoadStat", frozen=True):
    """The original six positions with their constraints, for a frame whose later ones do not
    read as SGLang 0.5.23's counts (another revision's trailing elements)."""

    num_running_reqs: _Count
    num_waiting_reqs: _Count
    num_tokens: _Count
    max_total_num_tokens: _Count
    attn_dp_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()
# Extra trailing elements are ignored: array_like decoding tolerates them unless
# forbid_unknown_fields is set, which later SGLang revisions rely on (a 12th element).
_decoder = msgspec.msgpack.Decoder(LoadStat)
_prefix_decoder = msgspec.msgpack.Decoder(_LoadStatPrefix)


def encode_stat(stat: LoadStat) -> bytes:
    """SGLang 0.5.23's eleven positions when the stat has the appended counts, else the six of
    older engines (never trailing nils a decoder would read as present-but-unknown)."""
    if stat.num_waiting_uncached_tokens is not None:
        return _encoder.encode(stat)
    return _encoder.encode(
        _LoadStatV1(
            stat.num_running_reqs,
            stat.num_waiting_reqs,
            stat.num_tokens,
            stat.max_total_num_tokens,
            stat.attn_dp_rank,
        )
    )


def encode_frame(seq: int, stat: LoadStat) -> tuple[bytes, bytes, bytes]:
    """The three frames of one publish."""
    return (LOAD_TOPIC, seq.to_bytes(SEQ_BYTES, "big", signed=True), encode_stat(stat))


def decode_frame(frames: list[bytes] | tuple[bytes, ...]) -> tuple[int, LoadStat]:
    """``(seq, stat)`` of a received multipart message; anything malformed raises ``WireError``."""
    if len(frames) != 3:
        raise WireError(f"expected 3 frames, got {len(frames)}")
    topic, seq_raw, payload = frames
    if topic != LOAD_TOPIC:
        raise WireError(f"unexpected topic {bytes(topic)[:32]!r}")
    if len(seq_raw) != SEQ_BYTES:
        raise WireError(f"sequence frame is {len(seq_raw)} bytes, expected {SEQ_BYTES}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise WireError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    seq = int.from_bytes(seq_raw, "big", signed=True)
    if seq < 0:
        raise WireError(f"negative sequence number {seq}")
    try:
        # Negative counts are refused here too (the Meta(ge=0) constraints).
        return seq, _decoder.decode(payload)
    except msgspec.DecodeError as exc:
        error = exc
    except RecursionError:
        raise WireError("bad LoadStat payload: nested too deeply") from None
    try:
        # Positions 7-11 that are not 0.5.23's counts (another revision's trailing elements,
        # SPEC §7: accepted whatever they hold): the original six, the rest unknown.
        prefix = _prefix_decoder.decode(payload)
    except msgspec.DecodeError:
        raise WireError(f"bad LoadStat payload: {error}") from None
    except RecursionError:
        # msgspec walks nested containers (trailing elements included) recursively and
        # raises RecursionError past Python's limit: a 1 KiB payload of nested arrays did.
        # It is garbage like any other, never an error that escapes into the ingest.
        raise WireError("bad LoadStat payload: nested too deeply") from None
    return seq, LoadStat(
        prefix.num_running_reqs,
        prefix.num_waiting_reqs,
        prefix.num_tokens,
        prefix.max_total_num_tokens,
        prefix.attn_dp_rank,
    )
