"""WatchLoads wire encoding: each changed worker serialized once, deltas assembled from bytes.

At a thousand workers publishing 20 frames/s, nearly every worker changes every push
interval, so the watch path encodes ~20 000 ``WorkerLoad`` messages a second. Building a
message per change (keyword construction plus a ``RankLoad`` per rank) cost about three
times as much as refreshing the fields of one long-lived message per worker and
serializing it (``bench/load_ingest.py`` and the note in bench/README.md), and no view
objects are built in between: the encoder reads the table's rank states directly.

The bytes are shared by every watcher (ARCHITECTURE: convert once per snapshot, never per
watcher). A ``WatchLoadsResponse`` is assembled by concatenating them as its repeated
``workers`` field: protobuf's wire format defines a message as the concatenation of its
fields, so the receiver parses it like any other (pinned by a unit test against the
protobuf runtime's own encoding).
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.load.convert import (
    CONVERSION_ERRORS,
    FRESHNESS,
    ViewErrors,
    lenient_worker_load,
    timestamp,
)
from controlplane.load.table import (
    APPENDED,
    Freshness,
    RankState,
    appended_sums,
    worker_freshness,
    worker_view,
)
from controlplane.load.wire import LoadStat
from controlplane.v1 import load_pb2

_LEN = 2  # wire type of length-delimited fields
_VARINT = 0
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
    """One long-lived ``WorkerLoad`` per worker, refreshed from rank states and serialized."""

    def __init__(self, stale_after_s: float, errors: ViewErrors | None = None) -> None:
        self._stale_after_s = stale_after_s
        self.errors = errors or ViewErrors()
        # Each message with the rank list it was built for and its rank messages: the table
        # replaces a worker's list on every (re)registration and never edits one, so the
        # same list object means the same endpoints (an identity check: comparing endpoints
        # per encode was a quarter of the push cost at N = 1000, bench/README.md).
        self._messages: dict[
            str, tuple[load_pb2.WorkerLoad, Sequence[RankState], list[load_pb2.RankLoad]]
        ] = {}

    def forget(self, url: str) -> None:
        self._messages.pop(url, None)

    def encode(self, url: str, ranks: Sequence[RankState], now: float) -> bytes:
        """The serialized ``WorkerLoad`` of ``url``; a value that does not fit is left out, never raised.

        One worker's broken value must not fail the whole message of every worker.
        """
        try:
            encoded = self._encode(url, ranks, now)
        except CONVERSION_ERRORS as exc:
            # A message half refreshed is dropped; the next encode builds a new one.
            self._messages.pop(url, None)
            message, broken = lenient_worker_load(worker_view(url, ranks, now, self._stale_after_s))
            self.errors.failed(url, broken, exc)
            return message.SerializeToString()
        if self.errors.failing:
            self.errors.converted(url)
        return encoded

    def _encode(self, url: str, ranks: Sequence[RankState], now: float) -> bytes:
        # Called ~20 000 times a second at N = 1000: the freshness rules of table.py are
        # inlined, and held lists of sub-messages spare walking the repeated field.
        entry = self._messages.get(url)
        if entry is None or entry[1] is not ranks:
            msg = load_pb2.WorkerLoad(url=url)
            for r in ranks:
                msg.ranks.add(dp_rank=r.dp_rank, endpoint=r.endpoint)
            entry = (msg, ranks, list(msg.ranks))
            self._messages[url] = entry
        msg, _, rank_messages = entry
        deadline = now - self._stale_after_s
        if len(ranks) == 1:
            # The usual worker (one scheduler): its sums are its rank's values.
            r = ranks[0]
            freshness, age = _fill(rank_messages[0], r, now, deadline)
            stat = r.stat
            if stat is not None:
                msg.num_running_reqs = stat.num_running_reqs
                msg.num_waiting_reqs = stat.num_waiting_reqs
                msg.num_tokens = stat.num_tokens
                msg.max_total_num_tokens = stat.max_total_num_tokens
            else:
                msg.num_running_reqs = msg.num_waiting_reqs = msg.num_tokens = msg.max_total_num_tokens = 0
            _set_appended(msg, stat)
            msg.freshness = freshness
            msg.age_s = age
            return msg.SerializeToString()
        running = waiting = tokens = capacity = 0
        oldest = 0.0
        any_unknown = any_stale = False
        for r, m in zip(ranks, rank_messages, strict=True):
            freshness, age = _fill(m, r, now, deadline)
            if freshness == _UNKNOWN:
                any_unknown = True
            elif freshness == _STALE:
                any_stale = True
            if age > oldest:
                oldest = age
            stat = r.stat
            if stat is not None:
                running += stat.num_running_reqs
                waiting += stat.num_waiting_reqs
                tokens += stat.num_tokens
                capacity += stat.max_total_num_tokens
        msg.num_running_reqs = running
        msg.num_waiting_reqs = waiting
        msg.num_tokens = tokens
        msg.max_total_num_tokens = capacity
        for name, value in zip(APPENDED, appended_sums([r.stat for r in ranks]), strict=True):
            if value is not None:
                setattr(msg, name, value)
            elif msg.HasField(name):
                msg.ClearField(name)
        msg.freshness = FRESHNESS[
            worker_freshness(any_unknown=any_unknown, any_stale=any_stale, ranks=len(ranks))
        ]
        msg.age_s = oldest
        return msg.SerializeToString()


def _fill(
    m: load_pb2.RankLoad, r: RankState, now: float, deadline: float
) -> tuple[load_pb2.Freshness, float]:
    """Refresh rank message ``m`` from ``r``; returns its freshness and age."""
    last_rx = r.last_rx
    if last_rx is None:
        freshness = _UNKNOWN
        age = 0.0
    else:
        freshness = _FRESH if last_rx >= deadline else _STALE
        age = now - last_rx if now > last_rx else 0.0
    m.freshness = freshness
    stat = r.stat
    if stat is not None:
        m.num_running_reqs = stat.num_running_reqs
        m.num_waiting_reqs = stat.num_waiting_reqs
        m.num_tokens = stat.num_tokens
        m.max_total_num_tokens = stat.max_total_num_tokens
    else:  # a re-registered worker may reuse a message that had values
        m.num_running_reqs = m.num_waiting_reqs = m.num_tokens = m.max_total_num_tokens = 0
    _set_appended(m, stat)
    m.seq = r.seq
    m.age_s = age
    m.frames_received = r.frames_received
    # These only grow, and a message lives as long as its rank states: zero now means
    # zero in the message already.
    if r.dropped_frames:
        m.dropped_frames = r.dropped_frames
    if r.publisher_restarts:
        m.publisher_restarts = r.publisher_restarts
    if r.malformed_frames:
        m.malformed_frames = r.malformed_frames
    m.connect_error = r.connect_error  # set and cleared: connections come and go
    return freshness, age


def _set_appended(m: load_pb2.WorkerLoad | load_pb2.RankLoad, stat: LoadStat | None) -> None:
    """SGLang 0.5.23's appended counts of ``stat`` (SPEC §7); unset when it has none (an older
    engine's six positions), cleared if an earlier frame had set them."""
    if (
        stat is not None
        and stat.total_prefill_busy_us is not None
        and stat.num_waiting_uncached_tokens is not None
    ):
        # The usual frame of an 0.5.23 engine: all five present.
        m.num_waiting_uncached_tokens = stat.num_waiting_uncached_tokens
        m.num_total_tokens = stat.num_total_tokens  # type: ignore[assignment]
        m.max_running_requests = stat.max_running_requests  # type: ignore[assignment]
        m.total_prefill_uncached_tokens = stat.total_prefill_uncached_tokens  # type: ignore[assignment]
        m.total_prefill_busy_us = stat.total_prefill_busy_us
        return
    for name in APPENDED:  # a six-position frame (or a part of the five)
        value = None if stat is None else getattr(stat, name)
        if value is not None:
            setattr(m, name, value)
        elif m.HasField(name):
            m.ClearField(name)


_UNKNOWN = FRESHNESS[Freshness.UNKNOWN]
_FRESH = FRESHNESS[Freshness.FRESH]
_STALE = FRESHNESS[Freshness.STALE]
