"""Contract <-> protobuf <-> operator JSON round trips, and the number formatter."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.contracts import (
    FIELDS,
    Band,
    ConflictPolicy,
    ContractError,
    Exact,
    Field,
    ParamSpec,
    SamplingContract,
    contract_from_proto,
    contract_to_json,
    contract_to_proto_params,
    format_number,
    parse_contract_json,
)
from controlplane.v1 import contract_pb2

_FLOAT_DOMAINS = {
    "temperature": (0.0, 2.0),
    "top_p": (1e-300, 1.0),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (1e-300, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
}


def _value(field: Field) -> st.SearchStrategy[float | int]:
    if field.name == "n":
        return st.integers(1, 128)
    if field.name == "top_k":
        return st.one_of(st.just(-1), st.integers(1, 2**53))
    lo, hi = _FLOAT_DOMAINS[field.name]
    return st.floats(lo, hi)


@st.composite
def contracts(draw: st.DrawFn) -> SamplingContract:
    """Random valid contracts: a non-empty subset of fields, exact values or bands (reject only)."""
    chosen = draw(st.lists(st.sampled_from(FIELDS), min_size=1, unique=True))
    conflict = draw(st.sampled_from(ConflictPolicy))
    params: dict[str, ParamSpec] = {}
    for f in chosen:
        if conflict is ConflictPolicy.REJECT and draw(st.booleans()):
            values = st.integers(1, 2**53) if f.name == "top_k" else _value(f)
            a, b = sorted((draw(values), draw(values)))
            default = draw(st.one_of(st.none(), st.sampled_from([a, b])))
            params[f.name] = Band(a, b, default)
        else:
            params[f.name] = Exact(draw(_value(f)))
    return SamplingContract(params, conflict)


@given(contracts())
def test_proto_round_trip(contract: SamplingContract) -> None:
    """model -> protobuf -> model gives the same contract."""
    params, conflict = contract_to_proto_params(contract)
    # Through real serialisation, as over gRPC.
    msg = contract_pb2.Contract(params=params, conflict=conflict)
    back = contract_pb2.Contract.FromString(msg.SerializeToString())
    assert contract_from_proto(back.params, back.conflict) == contract


@given(contracts())
def test_json_round_trip(contract: SamplingContract) -> None:
    """model -> operator JSON -> model gives the same contract (what `contract get` shows parses back)."""
    assert parse_contract_json(contract_to_json(contract), contract.conflict) == contract


def test_json_to_proto_and_back() -> None:
    """The seed example survives JSON -> model -> protobuf -> model -> JSON."""
    text = '{"temperature": 1, "top_p": 0.95, "top_k": {"min": 1, "max": 50, "default": 40}, "n": 1}'
    params, conflict = contract_to_proto_params(parse_contract_json(text))
    assert params["top_k"].band.default == 40.0 and params["top_p"].exact == 0.95
    assert conflict == contract_pb2.CONFLICT_POLICY_REJECT
    assert contract_to_json(contract_from_proto(params, conflict)) == text


def test_proto_unspecified_policy_is_reject() -> None:
    """An unset conflict policy reads as reject."""
    c = contract_from_proto({"n": contract_pb2.ParamSpec(exact=1)}, contract_pb2.CONFLICT_POLICY_UNSPECIFIED)
    assert c.conflict is ConflictPolicy.REJECT and c.params["n"] == Exact(1)


@pytest.mark.parametrize(
    ("params", "conflict", "message"),
    [
        ({"n": contract_pb2.ParamSpec()}, 1, '"n": ParamSpec sets neither exact nor band'),
        (
            {"n": contract_pb2.ParamSpec(exact=0.5)},
            1,
            '"n": value 0.5 is outside the allowed domain [1, 128]',
        ),
        ({"bogus": contract_pb2.ParamSpec(exact=1)}, 1, 'unknown parameter "bogus"'),
        ({}, 1, "sampling contract is empty"),
        ({"n": contract_pb2.ParamSpec(exact=1)}, 9, "conflict: unknown conflict policy 9"),
        (
            {"top_p": contract_pb2.ParamSpec(band=contract_pb2.Band(min=0.5, max=1))},
            2,
            '"top_p": a band requires conflict policy reject',
        ),
        (
            {"top_p": contract_pb2.ParamSpec(exact=math.nan)},
            1,
            '"top_p": value NaN is outside the allowed domain (0, 1]',
        ),
    ],
)
def test_proto_refusals(params: dict[str, contract_pb2.ParamSpec], conflict: int, message: str) -> None:
    """A protobuf contract the parser would refuse is refused, naming the field."""
    with pytest.raises(ContractError) as exc:
        contract_from_proto(params, conflict)
    assert str(exc.value).startswith(message)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.95, "0.95"),
        (1e-7, "0.0000001"),
        (1e20, "100000000000000000000"),
        (1.5, "1.5"),
        (-0.0, "-0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "NaN"),
        (40, "40"),
        (True, "1"),
    ],
)
def test_format_number_matches_rust_display(value: float, text: str) -> None:
    """Numbers print as Rust's f64 Display does (SGLang's router messages)."""
    assert format_number(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_format_number_reads_back(value: float) -> None:
    """The printed text reads back as the same double, and never uses an exponent."""
    text = format_number(value)
    assert float(text) == value and "e" not in text
