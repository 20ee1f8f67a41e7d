"""The contract model: ``Exact | Band`` per field plus one conflict policy (SPEC §3.1).

Values are immutable and validated on construction by ``parse``/``convert``; a hand-built
``SamplingContract`` can be checked with ``controlplane.contracts.parse.validate``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from controlplane.contracts.fields import FIELD_BY_NAME, FIELDS


class ContractError(ValueError):
    """A contract that cannot be applied; the message names the key, the value and the domain."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ConflictPolicy(enum.Enum):
    """What a router does with a client value that differs from the contract (SPEC §3.3)."""

    REJECT = "reject"
    ALLOW = "allow"


@dataclass(frozen=True, slots=True)
class Exact:
    """The engine must read exactly this value (an ``int`` for integral fields)."""

    value: float | int


@dataclass(frozen=True, slots=True)
class Band:
    """The engine must read a value in ``[min, max]``; ``default`` is injected when omitted."""

    min: float | int
    max: float | int
    default: float | int | None = None


ParamSpec = Exact | Band


def _ordered(params: Mapping[str, ParamSpec]) -> Mapping[str, ParamSpec]:
    unknown = [k for k in params if k not in FIELD_BY_NAME]
    if unknown:
        raise ContractError(f"unknown parameter {unknown[0]!r}", field=unknown[0])
    return MappingProxyType({f.name: params[f.name] for f in FIELDS if f.name in params})


@dataclass(frozen=True, slots=True, eq=False)
class SamplingContract:
    """One contract: a spec per governed field (kept in SPEC §2 order) and a conflict policy."""

    params: Mapping[str, ParamSpec]
    conflict: ConflictPolicy = ConflictPolicy.REJECT

    def __post_init__(self) -> None:
        # Re-key in §2 order and freeze, whatever mapping the caller handed us.
        object.__setattr__(self, "params", _ordered(self.params))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SamplingContract):
            return NotImplemented
        return self.conflict is other.conflict and dict(self.params) == dict(other.params)

    def __hash__(self) -> int:
        return hash((self.conflict, tuple(self.params.items())))
