import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConflictPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFLICT_POLICY_UNSPECIFIED: _ClassVar[ConflictPolicy]
    CONFLICT_POLICY_REJECT: _ClassVar[ConflictPolicy]
    CONFLICT_POLICY_ALLOW: _ClassVar[ConflictPolicy]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_UPDATE: _ClassVar[ChangeKind]
    CHANGE_KIND_DELETE: _ClassVar[ChangeKind]
    CHANGE_KIND_ROLLBACK: _ClassVar[ChangeKind]
CONFLICT_POLICY_UNSPECIFIED: ConflictPolicy
CONFLICT_POLICY_REJECT: ConflictPolicy
CONFLICT_POLICY_ALLOW: ConflictPolicy
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_UPDATE: ChangeKind
CHANGE_KIND_DELETE: ChangeKind
CHANGE_KIND_ROLLBACK: ChangeKind

class Band(_message.Message):
    __slots__ = ("min", "max", "default")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    min: float
    max: float
    default: float
    def __init__(self, min: _Optional[float] = ..., max: _Optional[float] = ..., default: _Optional[float] = ...) -> None: ...

class ParamSpec(_message.Message):
    __slots__ = ("exact", "band")
    EXACT_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    exact: float
    band: Band
    def __init__(self, exact: _Optional[float] = ..., band: _Optional[_Union[Band, _Mapping]] = ...) -> None: ...

class Contract(_message.Message):
    __slots__ = ("scope", "version", "revision", "params", "conflict", "author", "create_time", "comment", "change", "rolled_back_from_version")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParamSpec
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParamSpec, _Mapping]] = ...) -> None: ...
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    scope: str
    version: int
    revision: int
    params: _containers.MessageMap[str, ParamSpec]
    conflict: ConflictPolicy
    author: str
    create_time: _timestamp_pb2.Timestamp
    comment: str
    change: ChangeKind
    rolled_back_from_version: int
    def __init__(self, scope: _Optional[str] = ..., version: _Optional[int] = ..., revision: _Optional[int] = ..., params: _Optional[_Mapping[str, ParamSpec]] = ..., conflict: _Optional[_Union[ConflictPolicy, str]] = ..., author: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., comment: _Optional[str] = ..., change: _Optional[_Union[ChangeKind, str]] = ..., rolled_back_from_version: _Optional[int] = ...) -> None: ...

class GetContractRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    def __init__(self, scope: _Optional[str] = ...) -> None: ...

class GetContractResponse(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: Contract
    def __init__(self, contract: _Optional[_Union[Contract, _Mapping]] = ...) -> None: ...

class ListContractsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListContractsResponse(_message.Message):
    __slots__ = ("contracts", "revision")
    CONTRACTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    contracts: _containers.RepeatedCompositeFieldContainer[Contract]
    revision: int
    def __init__(self, contracts: _Optional[_Iterable[_Union[Contract, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class UpdateContractRequest(_message.Message):
    __slots__ = ("scope", "params", "conflict", "expected_version", "allow_missing", "comment")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParamSpec
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParamSpec, _Mapping]] = ...) -> None: ...
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    scope: str
    params: _containers.MessageMap[str, ParamSpec]
    conflict: ConflictPolicy
    expected_version: int
    allow_missing: bool
    comment: str
    def __init__(self, scope: _Optional[str] = ..., params: _Optional[_Mapping[str, ParamSpec]] = ..., conflict: _Optional[_Union[ConflictPolicy, str]] = ..., expected_version: _Optional[int] = ..., allow_missing: _Optional[bool] = ..., comment: _Optional[str] = ...) -> None: ...

class UpdateContractResponse(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: Contract
    def __init__(self, contract: _Optional[_Union[Contract, _Mapping]] = ...) -> None: ...

class DeleteContractRequest(_message.Message):
    __slots__ = ("scope", "expected_version", "comment")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    scope: str
    expected_version: int
    comment: str
    def __init__(self, scope: _Optional[str] = ..., expected_version: _Optional[int] = ..., comment: _Optional[str] = ...) -> None: ...

class DeleteContractResponse(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: Contract
    def __init__(self, contract: _Optional[_Union[Contract, _Mapping]] = ...) -> None: ...

class ListContractHistoryRequest(_message.Message):
    __slots__ = ("scope", "page_size", "page_token")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: str
    page_size: int
    page_token: str
    def __init__(self, scope: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListContractHistoryResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[Contract]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[Contract, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RollbackContractRequest(_message.Message):
    __slots__ = ("scope", "version", "expected_version", "comment")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    scope: str
    version: int
    expected_version: int
    comment: str
    def __init__(self, scope: _Optional[str] = ..., version: _Optional[int] = ..., expected_version: _Optional[int] = ..., comment: _Optional[str] = ...) -> None: ...

class RollbackContractResponse(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: Contract
    def __init__(self, contract: _Optional[_Union[Contract, _Mapping]] = ...) -> None: ...

class WatchContractsRequest(_message.Message):
    __slots__ = ("router_id", "known_revision")
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_REVISION_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    known_revision: int
    def __init__(self, router_id: _Optional[str] = ..., known_revision: _Optional[int] = ...) -> None: ...

class WatchContractsResponse(_message.Message):
    __slots__ = ("revision", "contracts")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONTRACTS_FIELD_NUMBER: _ClassVar[int]
    revision: int
    contracts: _containers.RepeatedCompositeFieldContainer[Contract]
    def __init__(self, revision: _Optional[int] = ..., contracts: _Optional[_Iterable[_Union[Contract, _Mapping]]] = ...) -> None: ...
