"""Parsing and validation of operator contracts (SPEC §3.1, reference A.2).

The operator JSON is decoded as ordered pairs (stdlib ``json`` with ``object_pairs_hook``) so a
repeated key is refused rather than silently resolved; this is not a hot path. Every refusal is
a ``ContractError`` whose message names the key, the value (printed as the operator wrote it,
numbers as Rust prints them, see ``formatting``) and the allowed domain.
"""

from __future__ import annotations

import json
import math
from typing import Any

from controlplane.contracts.fields import FIELD_BY_NAME, FIELD_NAMES, Field
from controlplane.contracts.formatting import format_number
from controlplane.contracts.model import (
    Band,
    ConflictPolicy,
    ContractError,
    Exact,
    ParamSpec,
    SamplingContract,
)

# Integral fields are forwarded as integers the engine stores in a 64-bit slot: SGLang's router
# accepts [i64::MIN, i64::MAX as f64) and refuses the rest as "too large to forward" (A.2 rule 11).
_I64_LIMIT = 2**63
_SUPPORTED = ", ".join(FIELD_NAMES)
_EXAMPLE = '{"temperature": 1, "top_p": 0.95}'
_BAND_SHAPE = '{"min": LO, "max": HI} with an optional "default": D'
_BAND_KEYS = ("min", "max", "default")
_SHOW_LIMIT = 60


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its ordered (key, value) pairs, repeats kept (told apart from arrays)."""


def _show(value: Any) -> str:
    """The operator's value as short JSON-like text for a message."""
    if isinstance(value, _Pairs):
        text = "{" + ", ".join(f"{json.dumps(k)}: {_show(v)}" for k, v in value) + "}"
    elif isinstance(value, list):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        text = format_number(value)
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_number(field: Field, value: float | int, role: str = "value") -> float | int:
    """Check one exact value or band bound against SPEC §2; return it normalised.

    Integral fields come back as ``int`` (``{"n": 1.0}`` injects ``1``), the others as ``float``.
    ``role`` names what is checked in the message ("value", "band min", ...).
    """
    key = json.dumps(field.name)
    if not _is_number(value):
        raise ContractError(
            f"{key}: {role} {_show(value)} is not a number (allowed: {field.domain})", field=field.name
        )
    if not field.contains(value):  # positive containment: NaN fails here
        raise ContractError(
            f"{key}: {role} {_show(value)} is outside the allowed domain {field.domain}", field=field.name
        )
    if not field.integral:
        return float(value)
    if isinstance(value, float):
        if math.isinf(value):
            raise ContractError(f"{key}: {role} {_show(value)} is too large to forward", field=field.name)
        if not value.is_integer():
            raise ContractError(
                f"{key}: {role} {_show(value)} must be a whole number ({field.domain})", field=field.name
            )
    if not -_I64_LIMIT <= value < _I64_LIMIT:
        raise ContractError(
            f"{key}: {role} {_show(value)} is too large to forward (must be below 2^63)", field=field.name
        )
    if float(value) != value:
        # Routers compare doubles and protobuf carries doubles: 2^53 + 1 cannot be enforced exactly.
        raise ContractError(
            f"{key}: {role} {_show(value)} is not exactly representable as a 64-bit float", field=field.name
        )
    return int(value)


def check_band(field: Field, band: Band, conflict: ConflictPolicy) -> Band:
    """Check a band's bounds, order and default (SPEC §3.1); return it normalised."""
    key = json.dumps(field.name)
    if field.name == "top_k":
        # -1 is top_k's "whole vocabulary" sentinel, not a point on a range (A.2 rule 8).
        for role, bound in (("band min", band.min), ("band max", band.max)):
            if _is_number(bound) and not bound >= 1:
                raise ContractError(
                    f"{key}: {role} {_show(bound)} is below 1 (band bounds must be >= 1; "
                    "-1 means the whole vocabulary and is not a band endpoint)",
                    field=field.name,
                )
    lo = check_number(field, band.min, "band min")
    hi = check_number(field, band.max, "band max")
    if lo > hi:
        raise ContractError(
            f"{key}: band min {_show(band.min)} is greater than band max {_show(band.max)}", field=field.name
        )
    default = None
    if band.default is not None:
        default = check_number(field, band.default, "band default")
        if not lo <= default <= hi:
            raise ContractError(
                f"{key}: band default {_show(band.default)} is outside the band "
                f"[{format_number(lo)}, {format_number(hi)}]",
                field=field.name,
            )
    if conflict is not ConflictPolicy.REJECT:
        raise ContractError(
            f"{key}: a band requires conflict policy reject (this contract's policy is {conflict.value})",
            field=field.name,
        )
    return Band(lo, hi, default)


def _check_spec(field: Field, spec: object, conflict: ConflictPolicy) -> ParamSpec:
    if isinstance(spec, Exact):
        return Exact(check_number(field, spec.value))
    if isinstance(spec, Band):
        return check_band(field, spec, conflict)
    raise ContractError(
        f"{json.dumps(field.name)}: {spec!r} is neither Exact nor Band", field=field.name
    )  # pragma: no cover - only reachable by hand-built values that ignore the types


def parse_conflict(value: str | ConflictPolicy) -> ConflictPolicy:
    """``"reject"`` or ``"allow"`` (or the enum itself) -> ConflictPolicy."""
    if isinstance(value, ConflictPolicy):
        return value
    try:
        return ConflictPolicy(value)
    except ValueError:
        raise ContractError(f"conflict policy must be reject or allow, got {json.dumps(value)}") from None


def validate(contract: SamplingContract) -> SamplingContract:
    """Re-run every check of SPEC §3.1 on a (possibly hand-built) contract; return it normalised."""
    if not contract.params:
        raise ContractError(f"sampling contract is empty: set at least one of {_SUPPORTED}")
    return SamplingContract(
        {
            name: _check_spec(FIELD_BY_NAME[name], spec, contract.conflict)
            for name, spec in contract.params.items()
        },
        contract.conflict,
    )


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _Pairs:
    return _Pairs(pairs)


def _decode(text: str | bytes) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_pairs_hook)
    except json.JSONDecodeError as exc:
        raise ContractError(
            f"sampling contract is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"expected a JSON object like {_EXAMPLE}"
        ) from None
    except (ValueError, RecursionError):  # bad UTF-8, integer literals past Python's digit limit
        raise ContractError(
            f"sampling contract is not valid JSON; expected a JSON object like {_EXAMPLE}"
        ) from None


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _parse_band(field: Field, pairs: _Pairs) -> Band:
    key = json.dumps(field.name)
    bounds: dict[str, Any] = {}
    for name, value in pairs:
        if name not in _BAND_KEYS:
            raise ContractError(
                f"{key}: band has unexpected key {json.dumps(name)} (a band is {_BAND_SHAPE})",
                field=field.name,
            )
        if name in bounds:
            raise ContractError(f"{key}: band sets {json.dumps(name)} more than once", field=field.name)
        bounds[name] = value
    if "min" not in bounds or "max" not in bounds:
        raise ContractError(
            f'{key}: band must have both "min" and "max" (a band is {_BAND_SHAPE}), got {_show(pairs)}',
            field=field.name,
        )
    for name in _BAND_KEYS:
        if name in bounds and not _is_number(bounds[name]):
            raise ContractError(
                f"{key}: band needs numeric bounds, {json.dumps(name)} is {_show(bounds[name])} "
                f"(allowed: {field.domain})",
                field=field.name,
            )
    return Band(bounds["min"], bounds["max"], bounds.get("default"))


def parse_contract_json(
    text: str | bytes, conflict: str | ConflictPolicy = ConflictPolicy.REJECT
) -> SamplingContract:
    """Parse ``--override-sampling-params`` / ``contract set`` JSON (SPEC §3.1), or raise ContractError."""
    policy = parse_conflict(conflict)
    doc = _decode(text)
    if not isinstance(doc, _Pairs):
        raise ContractError(f"sampling contract must be a JSON object like {_EXAMPLE}, got {_kind(doc)}")
    if not doc:
        raise ContractError(f"sampling contract is empty: set at least one of {_SUPPORTED}")
    params: dict[str, ParamSpec] = {}
    for name, value in doc:
        field = FIELD_BY_NAME.get(name)
        if field is None:
            raise ContractError(f"unknown parameter {json.dumps(name)} (supported: {_SUPPORTED})", field=name)
        if name in params:
            raise ContractError(f"{json.dumps(name)} is set more than once", field=name)
        spec: ParamSpec
        if _is_number(value):
            spec = Exact(value)
        elif isinstance(value, _Pairs):
            spec = _parse_band(field, value)
        else:
            raise ContractError(
                f'{json.dumps(name)}: {_show(value)} must be a number or a {{"min": LO, "max": HI}} band '
                f"(allowed: {field.domain})",
                field=name,
            )
        params[name] = _check_spec(field, spec, policy)
    return SamplingContract(params, policy)


__all__ = [
    "check_band",
    "check_number",
    "parse_conflict",
    "parse_contract_json",
    "validate",
]
