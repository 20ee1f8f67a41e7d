"""Load domain objects -> ``controlplane.v1`` messages (built once per change, shared by watchers)."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from controlplane.load.table import Freshness, WorkerView
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


def worker_load(view: WorkerView) -> load_pb2.WorkerLoad:
    # Keyword construction: one C call per message, the cheapest way to fill one with upb.
    return load_pb2.WorkerLoad(
        url=view.url,
        num_running_reqs=view.num_running_reqs,
        num_waiting_reqs=view.num_waiting_reqs,
        num_tokens=view.num_tokens,
        max_total_num_tokens=view.max_total_num_tokens,
        freshness=FRESHNESS[view.freshness],
        age_s=view.age_s,
        ranks=[
            load_pb2.RankLoad(
                dp_rank=r.dp_rank,
                endpoint=r.endpoint,
                num_running_reqs=r.num_running_reqs,
                num_waiting_reqs=r.num_waiting_reqs,
                num_tokens=r.num_tokens,
                max_total_num_tokens=r.max_total_num_tokens,
                seq=r.seq,
                age_s=r.age_s,
                dropped_frames=r.dropped_frames,
                publisher_restarts=r.publisher_restarts,
                freshness=FRESHNESS[r.freshness],
                frames_received=r.frames_received,
                malformed_frames=r.malformed_frames,
                connect_error=r.connect_error,
            )
            for r in view.ranks
        ],
    )
