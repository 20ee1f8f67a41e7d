"""Load domain objects -> ``controlplane.v1`` messages (built once per change, shared by watchers).

A value that does not fit its protobuf field (an int64 past its range) must never fail a whole
``GetLoads`` or ``WatchLoads`` answer, which carries every worker: that worker is
sent without the value (``lenient_worker_load``), counted and logged once per episode
(``ViewErrors``).
"""

from __future__ import annotations

from typing import Any

import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from controlplane import metrics
from controlplane.load.table import APPENDED, Freshness, RankView, WorkerView
from controlplane.store.workers import Protocol, WorkerRecord
from controlplane.v1 import load_pb2

PROTOCOLS = {
    Protocol.AUTO: load_pb2.WORKER_PROTOCOL_AUTO,
    Protocol.HTTP1: load_pb2.WORKER_PROTOCOL_HTTP1,
    Protocol.H2C: load_pb2.WORKER_PROTOCOL_H2C,
}
FRESHNESS = {
    Freshness.UNKNOWN: load_pb2.FRESHNESS_UNKNOWN,
    Freshness.FRESH: load_pb2.FRESHNESS_FRESH,
    Freshness.STALE: load_pb2.FRESHNESS_STALE,
}


def timestamp(unix_s: float) -> Timestamp:
    seconds = int(unix_s)
    return Timestamp(seconds=seconds, nanos=int((unix_s - seconds) * 1e9))


def worker_message(record: WorkerRecord) -> load_pb2.Worker:
    return load_pb2.Worker(
        url=record.url,
        protocol=PROTOCOLS[record.protocol],
        resolved_protocol=PROTOCOLS[record.resolved_protocol],
        models=record.models,
        load_endpoints=record.load_endpoints,
        load_topic=record.load_topic,
        dp_size=record.dp_size,
        discovered=record.discovered,
        register_time=timestamp(record.register_time_unix_s),
        discovery_error=record.discovery_error,
    )


log = structlog.get_logger("controlplane.loads")
# What protobuf raises for a value its field cannot hold (out of range, wrong type).
CONVERSION_ERRORS = (ValueError, TypeError, OverflowError)


class ViewErrors:
    """Workers whose load view had a value that did not fit: counted, logged once per episode."""

    def __init__(self) -> None:
        self.failing: set[str] = set()

    def failed(self, url: str, fields: list[str], error: BaseException) -> None:
        metrics.LOAD_VIEW_ERRORS.inc()
        if url not in self.failing:
            self.failing.add(url)
            log.warning("load_view_value_out_of_range", url=url, fields=fields, error=str(error))

    def converted(self, url: str) -> None:
        """``url`` converted whole again: the episode is over."""
        if url in self.failing:
            self.failing.discard(url)
            log.info("load_view_value_in_range_again", url=url)


def worker_load(view: WorkerView, errors: ViewErrors | None = None) -> load_pb2.WorkerLoad:
    """The ``WorkerLoad`` of ``view``; a value that does not fit is left out (see ``ViewErrors``)."""
    try:
        message = _worker_load(view)
    except CONVERSION_ERRORS as exc:
        message, broken = lenient_worker_load(view)
        if errors is not None:
            errors.failed(view.url, broken, exc)
        return message
    if errors is not None and errors.failing:
        errors.converted(view.url)
    return message


def lenient_worker_load(view: WorkerView) -> tuple[load_pb2.WorkerLoad, list[str]]:
    """The ``WorkerLoad`` of ``view`` set field by field, without those that do not fit; and their names."""
    message = load_pb2.WorkerLoad()
    broken = _set_fields(message, _worker_fields(view), "")
    for r in view.ranks:
        broken += _set_fields(message.ranks.add(), _rank_fields(r), f"ranks[{r.dp_rank}].")
    return message, broken


def _set_fields(message: Any, fields: dict[str, object], prefix: str) -> list[str]:
    broken: list[str] = []
    for name, value in fields.items():
        try:
            setattr(message, name, value)
        except CONVERSION_ERRORS:
            broken.append(prefix + name)
    return broken


def _appended(view: WorkerView | RankView) -> dict[str, object]:
    """The appended LoadStat counts the view has (optional fields: unset when unknown)."""
    return {name: value for name in APPENDED if (value := getattr(view, name)) is not None}


def _worker_fields(view: WorkerView) -> dict[str, object]:
    return {
        "url": view.url,
        "num_running_reqs": view.num_running_reqs,
        "num_waiting_reqs": view.num_waiting_reqs,
        "num_tokens": view.num_tokens,
        "max_total_num_tokens": view.max_total_num_tokens,
        "freshness": FRESHNESS[view.freshness],
        "age_s": view.age_s,
        **_appended(view),
    }


def _rank_fields(r: RankView) -> dict[str, object]:
    return {
        **_appended(r),
        "dp_rank": r.dp_rank,
        "endpoint": r.endpoint,
        "num_running_reqs": r.num_running_reqs,
        "num_waiting_reqs": r.num_waiting_reqs,
        "num_tokens": r.num_tokens,
        "max_total_num_tokens": r.max_total_num_tokens,
        "seq": r.seq,
        "age_s": r.age_s,
        "dropped_frames": r.dropped_frames,
        "publisher_restarts": r.publisher_restarts,
        "freshness": FRESHNESS[r.freshness],
        "frames_received": r.frames_received,
        "malformed_frames": r.malformed_frames,
        "connect_error": r.connect_error,
    }


def _worker_load(view: WorkerView) -> load_pb2.WorkerLoad:
    # Keyword construction: one C call per message (GetLoads; WatchLoads has encoding.py).
    return load_pb2.WorkerLoad(
        **_worker_fields(view),  # type: ignore[arg-type]
        ranks=[load_pb2.RankLoad(**_rank_fields(r)) for r in view.ranks],  # type: ignore[arg-type]
    )
