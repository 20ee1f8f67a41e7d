"""Store values -> controlplane.v1 messages."""

from __future__ import annotations

from controlplane.contracts import contract_to_proto_params
from controlplane.store import ChangeKind, ContractVersion, Snapshot
from controlplane.v1 import contract_pb2

_CHANGE_TO_PROTO = {
    ChangeKind.UPDATE: contract_pb2.CHANGE_KIND_UPDATE,
    ChangeKind.DELETE: contract_pb2.CHANGE_KIND_DELETE,
    ChangeKind.ROLLBACK: contract_pb2.CHANGE_KIND_ROLLBACK,
}


def version_to_proto(version: ContractVersion) -> contract_pb2.Contract:
    """One version; a deletion carries no params and an unspecified conflict policy."""
    msg = contract_pb2.Contract(
        scope=version.scope,
        version=version.version,
        revision=version.revision,
        author=version.author,
        comment=version.comment,
        change=_CHANGE_TO_PROTO[version.change],
        rolled_back_from_version=version.rolled_back_from_version,
    )
    msg.create_time.FromMicroseconds(version.create_time_us)
    if version.contract is not None:
        params, conflict = contract_to_proto_params(version.contract)
        for name, spec in params.items():
            msg.params[name].CopyFrom(spec)
        msg.conflict = conflict
    return msg


def snapshot_to_watch_response(snapshot: Snapshot) -> contract_pb2.WatchContractsResponse:
    """The complete live set at one revision, sorted by scope (contract.proto)."""
    return contract_pb2.WatchContractsResponse(
        revision=snapshot.revision,
        contracts=[version_to_proto(v) for v in snapshot.contracts.values()],
    )
