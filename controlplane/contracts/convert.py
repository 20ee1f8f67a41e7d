"""Contract model <-> protobuf (controlplane.v1) and <-> operator JSON.

Protobuf carries every number as a double, so integral values come back through the same
normalisation as the operator JSON: everything read from the wire is validated again (a watcher
must never apply a contract the parser would have refused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from controlplane.contracts.fields import FIELD_BY_NAME
from controlplane.contracts.formatting import format_number
from controlplane.contracts.model import (
    Band,
    ConflictPolicy,
    ContractError,
    Exact,
    ParamSpec,
    SamplingContract,
)
from controlplane.contracts.parse import validate
from controlplane.v1 import contract_pb2

_POLICY_TO_PROTO = {
    ConflictPolicy.REJECT: contract_pb2.CONFLICT_POLICY_REJECT,
    ConflictPolicy.ALLOW: contract_pb2.CONFLICT_POLICY_ALLOW,
}
# UNSPECIFIED means REJECT (contract.proto): the safe reading of an unset policy.
_POLICY_FROM_PROTO = {
    contract_pb2.CONFLICT_POLICY_UNSPECIFIED: ConflictPolicy.REJECT,
    contract_pb2.CONFLICT_POLICY_REJECT: ConflictPolicy.REJECT,
    contract_pb2.CONFLICT_POLICY_ALLOW: ConflictPolicy.ALLOW,
}


def policy_to_proto(policy: ConflictPolicy) -> contract_pb2.ConflictPolicy:
    """ConflictPolicy -> the protobuf enum value."""
    return _POLICY_TO_PROTO[policy]


def policy_from_proto(value: int) -> ConflictPolicy:
    """The protobuf enum value -> ConflictPolicy (UNSPECIFIED is REJECT); unknown values refused."""
    try:
        return _POLICY_FROM_PROTO[value]  # type: ignore[index]
    except KeyError:
        raise ContractError(f"conflict: unknown conflict policy {value}", field="conflict") from None


def spec_to_proto(spec: ParamSpec) -> contract_pb2.ParamSpec:
    """One Exact/Band -> protobuf ParamSpec."""
    if isinstance(spec, Exact):
        return contract_pb2.ParamSpec(exact=float(spec.value))
    band = contract_pb2.Band(min=float(spec.min), max=float(spec.max))
    if spec.default is not None:
        band.default = float(spec.default)
    return contract_pb2.ParamSpec(band=band)


def contract_to_proto_params(
    contract: SamplingContract,
) -> tuple[dict[str, contract_pb2.ParamSpec], contract_pb2.ConflictPolicy]:
    """A contract -> (the ``params`` map, the ``conflict`` enum value) of the protobuf messages."""
    params = {name: spec_to_proto(spec) for name, spec in contract.params.items()}
    return params, policy_to_proto(contract.conflict)


def _spec_from_proto(name: str, spec: contract_pb2.ParamSpec) -> ParamSpec:
    which = spec.WhichOneof("spec")
    if which == "exact":
        return Exact(spec.exact)
    if which == "band":
        band = spec.band
        return Band(band.min, band.max, band.default if band.HasField("default") else None)
    raise ContractError(f"{json.dumps(name)}: ParamSpec sets neither exact nor band", field=name)


def contract_from_proto(params: Mapping[str, contract_pb2.ParamSpec], conflict: int) -> SamplingContract:
    """Protobuf ``params`` + ``conflict`` -> a validated contract; ContractError names the field."""
    policy = policy_from_proto(conflict)
    for name in params:
        if name not in FIELD_BY_NAME:
            raise ContractError(
                f"unknown parameter {json.dumps(name)} (supported: {', '.join(FIELD_BY_NAME)})", field=name
            )
    specs = {name: _spec_from_proto(name, spec) for name, spec in params.items()}
    return validate(SamplingContract(specs, policy))


def spec_to_json(spec: ParamSpec) -> str:
    """One field's spec as operator JSON: ``0.7`` or ``{"min": 1, "max": 50, "default": 40}``."""
    if isinstance(spec, Exact):
        return format_number(spec.value)
    text = f'{{"min": {format_number(spec.min)}, "max": {format_number(spec.max)}'
    if spec.default is not None:
        text += f', "default": {format_number(spec.default)}'
    return text + "}"


def contract_to_json(contract: SamplingContract) -> str:
    """The operator JSON form of the params (what ``contract set`` takes), in SPEC §2 order."""
    return "{" + ", ".join(f"{json.dumps(k)}: {spec_to_json(s)}" for k, s in contract.params.items()) + "}"
