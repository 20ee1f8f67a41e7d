"""Sampling contracts (SPEC §2, §3.1): the governed fields, ``Exact | Band``, parsing, protobuf.

Pure and dependency-light (stdlib, msgspec, controlplane.v1): the router imports it too, so both
planes refuse exactly the same contracts.
"""

from __future__ import annotations

from controlplane.contracts.convert import (
    contract_from_proto,
    contract_to_json,
    contract_to_proto_params,
    policy_from_proto,
    policy_to_proto,
    spec_to_json,
)
from controlplane.contracts.fields import FIELD_BY_NAME, FIELD_NAMES, FIELDS, Field
from controlplane.contracts.formatting import format_number
from controlplane.contracts.model import (
    Band,
    ConflictPolicy,
    ContractError,
    Exact,
    ParamSpec,
    SamplingContract,
)
from controlplane.contracts.parse import parse_conflict, parse_contract_json, validate

__all__ = [
    "FIELDS",
    "FIELD_BY_NAME",
    "FIELD_NAMES",
    "Band",
    "ConflictPolicy",
    "ContractError",
    "Exact",
    "Field",
    "ParamSpec",
    "SamplingContract",
    "contract_from_proto",
    "contract_to_json",
    "contract_to_proto_params",
    "format_number",
    "parse_conflict",
    "parse_contract_json",
    "policy_from_proto",
    "policy_to_proto",
    "spec_to_json",
    "validate",
]
