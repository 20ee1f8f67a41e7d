import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_PROTOCOL_UNSPECIFIED: _ClassVar[WorkerProtocol]
    WORKER_PROTOCOL_AUTO: _ClassVar[WorkerProtocol]
    WORKER_PROTOCOL_HTTP1: _ClassVar[WorkerProtocol]
    WORKER_PROTOCOL_H2C: _ClassVar[WorkerProtocol]

class Freshness(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRESHNESS_UNSPECIFIED: _ClassVar[Freshness]
    FRESHNESS_UNKNOWN: _ClassVar[Freshness]
    FRESHNESS_FRESH: _ClassVar[Freshness]
    FRESHNESS_STALE: _ClassVar[Freshness]
WORKER_PROTOCOL_UNSPECIFIED: WorkerProtocol
WORKER_PROTOCOL_AUTO: WorkerProtocol
WORKER_PROTOCOL_HTTP1: WorkerProtocol
WORKER_PROTOCOL_H2C: WorkerProtocol
FRESHNESS_UNSPECIFIED: Freshness
FRESHNESS_UNKNOWN: Freshness
FRESHNESS_FRESH: Freshness
FRESHNESS_STALE: Freshness

class Worker(_message.Message):
    __slots__ = ("url", "protocol", "resolved_protocol", "models", "load_endpoints", "load_topic", "dp_size", "discovered", "register_time", "discovery_error")
    URL_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LOAD_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    DISCOVERED_FIELD_NUMBER: _ClassVar[int]
    REGISTER_TIME_FIELD_NUMBER: _ClassVar[int]
    DISCOVERY_ERROR_FIELD_NUMBER: _ClassVar[int]
    url: str
    protocol: WorkerProtocol
    resolved_protocol: WorkerProtocol
    models: _containers.RepeatedScalarFieldContainer[str]
    load_endpoints: _containers.RepeatedScalarFieldContainer[str]
    load_topic: str
    dp_size: int
    discovered: bool
    register_time: _timestamp_pb2.Timestamp
    discovery_error: str
    def __init__(self, url: _Optional[str] = ..., protocol: _Optional[_Union[WorkerProtocol, str]] = ..., resolved_protocol: _Optional[_Union[WorkerProtocol, str]] = ..., models: _Optional[_Iterable[str]] = ..., load_endpoints: _Optional[_Iterable[str]] = ..., load_topic: _Optional[str] = ..., dp_size: _Optional[int] = ..., discovered: _Optional[bool] = ..., register_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., discovery_error: _Optional[str] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("url", "protocol", "models", "load_endpoints")
    URL_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LOAD_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    url: str
    protocol: WorkerProtocol
    models: _containers.RepeatedScalarFieldContainer[str]
    load_endpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, url: _Optional[str] = ..., protocol: _Optional[_Union[WorkerProtocol, str]] = ..., models: _Optional[_Iterable[str]] = ..., load_endpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class DeregisterWorkerRequest(_message.Message):
    __slots__ = ("url",)
    URL_FIELD_NUMBER: _ClassVar[int]
    url: str
    def __init__(self, url: _Optional[str] = ...) -> None: ...

class DeregisterWorkerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ...) -> None: ...

class RankLoad(_message.Message):
    __slots__ = ("dp_rank", "endpoint", "num_running_reqs", "num_waiting_reqs", "num_tokens", "max_total_num_tokens", "seq", "age_s", "dropped_frames", "publisher_restarts", "freshness", "frames_received", "malformed_frames", "connect_error", "num_waiting_uncached_tokens", "num_total_tokens", "max_running_requests", "total_prefill_uncached_tokens", "total_prefill_busy_us")
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_REQS_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_REQS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    MALFORMED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CONNECT_ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_UNCACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_PREFILL_UNCACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_PREFILL_BUSY_US_FIELD_NUMBER: _ClassVar[int]
    dp_rank: int
    endpoint: str
    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    max_total_num_tokens: int
    seq: int
    age_s: float
    dropped_frames: int
    publisher_restarts: int
    freshness: Freshness
    frames_received: int
    malformed_frames: int
    connect_error: str
    num_waiting_uncached_tokens: int
    num_total_tokens: int
    max_running_requests: int
    total_prefill_uncached_tokens: int
    total_prefill_busy_us: int
    def __init__(self, dp_rank: _Optional[int] = ..., endpoint: _Optional[str] = ..., num_running_reqs: _Optional[int] = ..., num_waiting_reqs: _Optional[int] = ..., num_tokens: _Optional[int] = ..., max_total_num_tokens: _Optional[int] = ..., seq: _Optional[int] = ..., age_s: _Optional[float] = ..., dropped_frames: _Optional[int] = ..., publisher_restarts: _Optional[int] = ..., freshness: _Optional[_Union[Freshness, str]] = ..., frames_received: _Optional[int] = ..., malformed_frames: _Optional[int] = ..., connect_error: _Optional[str] = ..., num_waiting_uncached_tokens: _Optional[int] = ..., num_total_tokens: _Optional[int] = ..., max_running_requests: _Optional[int] = ..., total_prefill_uncached_tokens: _Optional[int] = ..., total_prefill_busy_us: _Optional[int] = ...) -> None: ...

class WorkerLoad(_message.Message):
    __slots__ = ("url", "num_running_reqs", "num_waiting_reqs", "num_tokens", "max_total_num_tokens", "freshness", "age_s", "ranks", "num_waiting_uncached_tokens", "num_total_tokens", "max_running_requests", "total_prefill_uncached_tokens", "total_prefill_busy_us")
    URL_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_REQS_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_REQS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_UNCACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_PREFILL_UNCACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_PREFILL_BUSY_US_FIELD_NUMBER: _ClassVar[int]
    url: str
    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    max_total_num_tokens: int
    freshness: Freshness
    age_s: float
    ranks: _containers.RepeatedCompositeFieldContainer[RankLoad]
    num_waiting_uncached_tokens: int
    num_total_tokens: int
    max_running_requests: int
    total_prefill_uncached_tokens: int
    total_prefill_busy_us: int
    def __init__(self, url: _Optional[str] = ..., num_running_reqs: _Optional[int] = ..., num_waiting_reqs: _Optional[int] = ..., num_tokens: _Optional[int] = ..., max_total_num_tokens: _Optional[int] = ..., freshness: _Optional[_Union[Freshness, str]] = ..., age_s: _Optional[float] = ..., ranks: _Optional[_Iterable[_Union[RankLoad, _Mapping]]] = ..., num_waiting_uncached_tokens: _Optional[int] = ..., num_total_tokens: _Optional[int] = ..., max_running_requests: _Optional[int] = ..., total_prefill_uncached_tokens: _Optional[int] = ..., total_prefill_busy_us: _Optional[int] = ...) -> None: ...

class GetLoadsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLoadsResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerLoad]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerLoad, _Mapping]]] = ...) -> None: ...

class WatchLoadsRequest(_message.Message):
    __slots__ = ("router_id",)
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    def __init__(self, router_id: _Optional[str] = ...) -> None: ...

class WatchLoadsResponse(_message.Message):
    __slots__ = ("full", "workers", "removed_urls", "time")
    FULL_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_URLS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    full: bool
    workers: _containers.RepeatedCompositeFieldContainer[WorkerLoad]
    removed_urls: _containers.RepeatedScalarFieldContainer[str]
    time: _timestamp_pb2.Timestamp
    def __init__(self, full: _Optional[bool] = ..., workers: _Optional[_Iterable[_Union[WorkerLoad, _Mapping]]] = ..., removed_urls: _Optional[_Iterable[str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
