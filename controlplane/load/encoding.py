"""WatchLoads wire encoding: each changed worker serialized once, deltas assembled from bytes.

At a thousand workers publishing 20 frames/s, nearly every worker changes every push
interval, so the watch path encodes ~20 000 ``WorkerLoad`` messages a second. They are
written in protobuf's wire format directly from the table's rank states (no view
objects, no message objects): building a message per change cost about four times as
much, refreshing one long-lived message per worker and serializing it about 1.3 times
(``bench/load_ingest.py`` and the notes in bench/README.md).

The bytes are shared by every watcher (ARCHITECTURE: convert once per snapshot, never per
watcher). A ``WatchLoadsResponse`` is assembled by concatenating them as its repeated
``workers`` field: protobuf's wire format defines a message as the concatenation of its
fields, so the receiver parses it like any other (pinned by a unit test against the
protobuf runtime's own encoding).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from controlplane.load.convert import timestamp
from controlplane.load.table import Freshness, RankState, rank_freshness, worker_freshness
from controlplane.v1 import load_pb2

_VARINT = 0  # protobuf wire types
_FIXED64 = 1
_LEN = 2
_R = load_pb2.WatchLoadsResponse
_TAG_FULL = bytes([(_R.FULL_FIELD_NUMBER << 3) | _VARINT])
_TAG_WORKERS = bytes([(_R.WORKERS_FIELD_NUMBER << 3) | _LEN])
_TAG_REMOVED = bytes([(_R.REMOVED_URLS_FIELD_NUMBER << 3) | _LEN])
_TAG_TIME = bytes([(_R.TIME_FIELD_NUMBER << 3) | _LEN])


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def watch_response(full: bool, workers: Sequence[bytes], removed: Sequence[str], unix_s: float) -> bytes:
    """The serialized ``WatchLoadsResponse`` of pre-serialized ``WorkerLoad`` messages."""
    parts: list[bytes] = [_TAG_FULL, b"\x01"] if full else []
    for worker in workers:
        parts += (_TAG_WORKERS, _varint(len(worker)), worker)
    for url in removed:
        raw = url.encode()
        parts += (_TAG_REMOVED, _varint(len(raw)), raw)
    stamp = timestamp(unix_s).SerializeToString()
    parts += (_TAG_TIME, _varint(len(stamp)), stamp)
    return b"".join(parts)


class WorkerLoadEncoder:
    """Serializes a worker's ``WorkerLoad`` straight from its rank states.

    The per-registration parts (URL, each rank's dp rank and endpoint) are encoded once;
    per push only the numbers are, field by field in protobuf's wire format (proto3: zero
    values omitted, int64 as two's complement varints, doubles as fixed 64-bit). Setting
    the fields of a long-lived protobuf message and serializing it cost about twice as much
    (``bench/load_ingest.py``, bench/README.md); a unit test pins the bytes against the
    protobuf runtime's parser for arbitrary states.
    """

    def __init__(self, stale_after_s: float) -> None:
        self._stale_after_s = stale_after_s
        # Each worker's constant parts with the rank list they were built for: the table
        # replaces a worker's list on every (re)registration and never edits one, so the
        # same list object means the same endpoints (an identity check per encode).
        self._constant: dict[str, tuple[Sequence[RankState], bytes, list[bytes]]] = {}

    def forget(self, url: str) -> None:
        self._constant.pop(url, None)

    def encode(self, url: str, ranks: Sequence[RankState], now: float) -> bytes:
        entry = self._constant.get(url)
        if entry is None or entry[0] is not ranks:
            prefixes = [_number(_RK_DP_RANK, r.dp_rank) + _text(_RK_ENDPOINT, r.endpoint) for r in ranks]
            entry = (ranks, _text(_WK_URL, url), prefixes)
            self._constant[url] = entry
        deadline = now - self._stale_after_s
        running = waiting = tokens = capacity = 0
        oldest = 0.0
        any_unknown = any_stale = False
        parts: list[bytes] = []
        for r, prefix in zip(ranks, entry[2], strict=True):
            freshness = rank_freshness(r, deadline)
            any_unknown |= freshness is Freshness.UNKNOWN
            any_stale |= freshness is Freshness.STALE
            age = 0.0 if r.last_rx is None else max(0.0, now - r.last_rx)
            oldest = max(oldest, age)
            stat = r.stat
            if stat is None:
                r_running = r_waiting = r_tokens = r_capacity = 0
            else:
                r_running = stat.num_running_reqs
                r_waiting = stat.num_waiting_reqs
                r_tokens = stat.num_tokens
                r_capacity = stat.max_total_num_tokens
                running += r_running
                waiting += r_waiting
                tokens += r_tokens
                capacity += r_capacity
            body = b"".join(
                (
                    prefix,
                    _number(_RK_RUNNING, r_running),
                    _number(_RK_WAITING, r_waiting),
                    _number(_RK_TOKENS, r_tokens),
                    _number(_RK_CAPACITY, r_capacity),
                    _number(_RK_SEQ, r.seq),
                    _RK_AGE + _double(age) if age else b"",
                    _number(_RK_DROPPED, r.dropped_frames),
                    _number(_RK_RESTARTS, r.publisher_restarts),
                    _number(_RK_FRESHNESS, freshness),
                    _number(_RK_FRAMES, r.frames_received),
                    _number(_RK_MALFORMED, r.malformed_frames),
                )
            )
            parts += (_WK_RANKS, _varint(len(body)), body)
        worker = worker_freshness(any_unknown=any_unknown, any_stale=any_stale, ranks=len(ranks))
        return b"".join(
            (
                entry[1],
                _number(_WK_RUNNING, running),
                _number(_WK_WAITING, waiting),
                _number(_WK_TOKENS, tokens),
                _number(_WK_CAPACITY, capacity),
                _number(_WK_FRESHNESS, worker),
                _WK_AGE + _double(oldest) if oldest else b"",
                *parts,
            )
        )


_U64 = (1 << 64) - 1
_SMALL = [bytes([i]) for i in range(0x80)]
_double = struct.Struct("<d").pack


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _number(tag: bytes, value: int) -> bytes:
    """An int64/int32/enum field; proto3 omits zero."""
    if not value:
        return b""
    if 0 < value < 0x80:
        return tag + _SMALL[value]
    return tag + _varint(value & _U64)  # a negative int64 is its 64-bit two's complement


def _text(tag: bytes, value: str) -> bytes:
    if not value:
        return b""
    raw = value.encode()
    return tag + _varint(len(raw)) + raw


_W = load_pb2.WorkerLoad
_WK_URL = _tag(_W.URL_FIELD_NUMBER, _LEN)
_WK_RUNNING = _tag(_W.NUM_RUNNING_REQS_FIELD_NUMBER, _VARINT)
_WK_WAITING = _tag(_W.NUM_WAITING_REQS_FIELD_NUMBER, _VARINT)
_WK_TOKENS = _tag(_W.NUM_TOKENS_FIELD_NUMBER, _VARINT)
_WK_CAPACITY = _tag(_W.MAX_TOTAL_NUM_TOKENS_FIELD_NUMBER, _VARINT)
_WK_FRESHNESS = _tag(_W.FRESHNESS_FIELD_NUMBER, _VARINT)
_WK_AGE = _tag(_W.AGE_S_FIELD_NUMBER, _FIXED64)
_WK_RANKS = _tag(_W.RANKS_FIELD_NUMBER, _LEN)
_K = load_pb2.RankLoad
_RK_DP_RANK = _tag(_K.DP_RANK_FIELD_NUMBER, _VARINT)
_RK_ENDPOINT = _tag(_K.ENDPOINT_FIELD_NUMBER, _LEN)
_RK_RUNNING = _tag(_K.NUM_RUNNING_REQS_FIELD_NUMBER, _VARINT)
_RK_WAITING = _tag(_K.NUM_WAITING_REQS_FIELD_NUMBER, _VARINT)
_RK_TOKENS = _tag(_K.NUM_TOKENS_FIELD_NUMBER, _VARINT)
_RK_CAPACITY = _tag(_K.MAX_TOTAL_NUM_TOKENS_FIELD_NUMBER, _VARINT)
_RK_SEQ = _tag(_K.SEQ_FIELD_NUMBER, _VARINT)
_RK_AGE = _tag(_K.AGE_S_FIELD_NUMBER, _FIXED64)
_RK_DROPPED = _tag(_K.DROPPED_FRAMES_FIELD_NUMBER, _VARINT)
_RK_RESTARTS = _tag(_K.PUBLISHER_RESTARTS_FIELD_NUMBER, _VARINT)
_RK_FRESHNESS = _tag(_K.FRESHNESS_FIELD_NUMBER, _VARINT)
_RK_FRAMES = _tag(_K.FRAMES_RECEIVED_FIELD_NUMBER, _VARINT)
_RK_MALFORMED = _tag(_K.MALFORMED_FRAMES_FIELD_NUMBER, _VARINT)
