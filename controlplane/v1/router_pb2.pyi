import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RejectionCount(_message.Message):
    __slots__ = ("scope", "param", "count", "client")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    scope: str
    param: str
    count: int
    client: str
    def __init__(self, scope: _Optional[str] = ..., param: _Optional[str] = ..., count: _Optional[int] = ..., client: _Optional[str] = ...) -> None: ...

class ReportRouterStatusRequest(_message.Message):
    __slots__ = ("router_id", "boot_id", "applied_revision", "apply_error", "rejections", "ejected_workers", "control_plane_address")
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_REVISION_FIELD_NUMBER: _ClassVar[int]
    APPLY_ERROR_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    EJECTED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PLANE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    boot_id: str
    applied_revision: int
    apply_error: str
    rejections: _containers.RepeatedCompositeFieldContainer[RejectionCount]
    ejected_workers: _containers.RepeatedScalarFieldContainer[str]
    control_plane_address: str
    def __init__(self, router_id: _Optional[str] = ..., boot_id: _Optional[str] = ..., applied_revision: _Optional[int] = ..., apply_error: _Optional[str] = ..., rejections: _Optional[_Iterable[_Union[RejectionCount, _Mapping]]] = ..., ejected_workers: _Optional[_Iterable[str]] = ..., control_plane_address: _Optional[str] = ...) -> None: ...

class ReportRouterStatusResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRoutersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RouterStatus(_message.Message):
    __slots__ = ("router_id", "boot_id", "applied_revision", "apply_error", "connected", "last_report_time", "up_to_date", "ejected_workers", "control_plane_address")
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_REVISION_FIELD_NUMBER: _ClassVar[int]
    APPLY_ERROR_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_TIME_FIELD_NUMBER: _ClassVar[int]
    UP_TO_DATE_FIELD_NUMBER: _ClassVar[int]
    EJECTED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PLANE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    boot_id: str
    applied_revision: int
    apply_error: str
    connected: bool
    last_report_time: _timestamp_pb2.Timestamp
    up_to_date: bool
    ejected_workers: _containers.RepeatedScalarFieldContainer[str]
    control_plane_address: str
    def __init__(self, router_id: _Optional[str] = ..., boot_id: _Optional[str] = ..., applied_revision: _Optional[int] = ..., apply_error: _Optional[str] = ..., connected: _Optional[bool] = ..., last_report_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., up_to_date: _Optional[bool] = ..., ejected_workers: _Optional[_Iterable[str]] = ..., control_plane_address: _Optional[str] = ...) -> None: ...

class ListRoutersResponse(_message.Message):
    __slots__ = ("routers", "current_revision")
    ROUTERS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    routers: _containers.RepeatedCompositeFieldContainer[RouterStatus]
    current_revision: int
    def __init__(self, routers: _Optional[_Iterable[_Union[RouterStatus, _Mapping]]] = ..., current_revision: _Optional[int] = ...) -> None: ...

class GetRejectionStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KeyCount(_message.Message):
    __slots__ = ("key", "count")
    KEY_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    key: str
    count: int
    def __init__(self, key: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class GetRejectionStatsResponse(_message.Message):
    __slots__ = ("total", "by_field", "by_scope", "by_router", "detail", "by_client", "client_detail")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_FIELD_NUMBER: _ClassVar[int]
    BY_SCOPE_FIELD_NUMBER: _ClassVar[int]
    BY_ROUTER_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    BY_CLIENT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_DETAIL_FIELD_NUMBER: _ClassVar[int]
    total: int
    by_field: _containers.RepeatedCompositeFieldContainer[KeyCount]
    by_scope: _containers.RepeatedCompositeFieldContainer[KeyCount]
    by_router: _containers.RepeatedCompositeFieldContainer[KeyCount]
    detail: _containers.RepeatedCompositeFieldContainer[RejectionCount]
    by_client: _containers.RepeatedCompositeFieldContainer[KeyCount]
    client_detail: _containers.RepeatedCompositeFieldContainer[RejectionCount]
    def __init__(self, total: _Optional[int] = ..., by_field: _Optional[_Iterable[_Union[KeyCount, _Mapping]]] = ..., by_scope: _Optional[_Iterable[_Union[KeyCount, _Mapping]]] = ..., by_router: _Optional[_Iterable[_Union[KeyCount, _Mapping]]] = ..., detail: _Optional[_Iterable[_Union[RejectionCount, _Mapping]]] = ..., by_client: _Optional[_Iterable[_Union[KeyCount, _Mapping]]] = ..., client_detail: _Optional[_Iterable[_Union[RejectionCount, _Mapping]]] = ...) -> None: ...
