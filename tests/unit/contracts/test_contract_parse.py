"""Parsing and validation of operator contracts (SPEC §3.1): every refusal, with its message."""

from __future__ import annotations

import pytest

from controlplane.contracts import (
    Band,
    ConflictPolicy,
    ContractError,
    Exact,
    SamplingContract,
    parse_conflict,
    parse_contract_json,
    validate,
)

SUPPORTED = "temperature, top_p, top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty, n"
EXAMPLE = '{"temperature": 1, "top_p": 0.95}'
SHAPE = '{"min": LO, "max": HI} with an optional "default": D'

# (operator JSON, exact message). Pinned: operators read these at startup and in `contract set`.
REFUSALS: list[tuple[str | bytes, str]] = [
    ("[]", f"sampling contract must be a JSON object like {EXAMPLE}, got an array"),
    ('[["temperature", 1]]', f"sampling contract must be a JSON object like {EXAMPLE}, got an array"),
    ('"x"', f"sampling contract must be a JSON object like {EXAMPLE}, got a string"),
    ("1", f"sampling contract must be a JSON object like {EXAMPLE}, got a number"),
    ("null", f"sampling contract must be a JSON object like {EXAMPLE}, got null"),
    (
        "temperature=1",
        "sampling contract is not valid JSON (Expecting value at line 1 column 1); "
        f"expected a JSON object like {EXAMPLE}",
    ),
    (b"{\xff}", f"sampling contract is not valid JSON; expected a JSON object like {EXAMPLE}"),
    ("{}", f"sampling contract is empty: set at least one of {SUPPORTED}"),
    ('{"max_tokens": 1}', f'unknown parameter "max_tokens" (supported: {SUPPORTED})'),
    ('{"Temperature": 1}', f'unknown parameter "Temperature" (supported: {SUPPORTED})'),
    ('{"temperature": 1, "temperature": 1}', '"temperature" is set more than once'),
    (
        '{"temperature": "1"}',
        '"temperature": "1" must be a number or a {"min": LO, "max": HI} band (allowed: [0, 2])',
    ),
    (
        '{"temperature": true}',
        '"temperature": true must be a number or a {"min": LO, "max": HI} band (allowed: [0, 2])',
    ),
    ('{"top_p": null}', '"top_p": null must be a number or a {"min": LO, "max": HI} band (allowed: (0, 1])'),
    ('{"n": [1]}', '"n": [1] must be a number or a {"min": LO, "max": HI} band (allowed: [1, 128])'),
    (
        '{"temperature": {"min": 0}}',
        f'"temperature": band must have both "min" and "max" (a band is {SHAPE}), got {{"min": 0}}',
    ),
    ('{"temperature": {"min": 0, "max": 1, "max": 1}}', '"temperature": band sets "max" more than once'),
    (
        '{"temperature": {"min": 0, "max": 1, "typo": 1}}',
        f'"temperature": band has unexpected key "typo" (a band is {SHAPE})',
    ),
    (
        '{"temperature": {"min": "0", "max": 1}}',
        '"temperature": band needs numeric bounds, "min" is "0" (allowed: [0, 2])',
    ),
    (
        '{"temperature": {"min": 0, "max": null}}',
        '"temperature": band needs numeric bounds, "max" is null (allowed: [0, 2])',
    ),
    (
        '{"temperature": {"min": 0, "max": 1, "default": false}}',
        '"temperature": band needs numeric bounds, "default" is false (allowed: [0, 2])',
    ),
    ('{"temperature": {"min": 1.5, "max": 1}}', '"temperature": band min 1.5 is greater than band max 1'),
    (
        '{"top_k": {"min": -1, "max": 5}}',
        '"top_k": band min -1 is below 1 (band bounds must be >= 1; '
        "-1 means the whole vocabulary and is not a band endpoint)",
    ),
    (
        '{"top_k": {"min": 1, "max": 0}}',
        '"top_k": band max 0 is below 1 (band bounds must be >= 1; '
        "-1 means the whole vocabulary and is not a band endpoint)",
    ),
    ('{"temperature": 3}', '"temperature": value 3 is outside the allowed domain [0, 2]'),
    ('{"temperature": -0.5}', '"temperature": value -0.5 is outside the allowed domain [0, 2]'),
    ('{"temperature": NaN}', '"temperature": value NaN is outside the allowed domain [0, 2]'),
    ('{"temperature": 1e400}', '"temperature": value inf is outside the allowed domain [0, 2]'),
    ('{"top_p": 0}', '"top_p": value 0 is outside the allowed domain (0, 1]'),
    ('{"top_k": 0}', '"top_k": value 0 is outside the allowed domain >= 1, or exactly -1'),
    ('{"top_k": -2}', '"top_k": value -2 is outside the allowed domain >= 1, or exactly -1'),
    ('{"min_p": 1.0000001}', '"min_p": value 1.0000001 is outside the allowed domain [0, 1]'),
    ('{"repetition_penalty": 0}', '"repetition_penalty": value 0 is outside the allowed domain (0, 2]'),
    ('{"frequency_penalty": 2.5}', '"frequency_penalty": value 2.5 is outside the allowed domain [-2, 2]'),
    ('{"presence_penalty": -3}', '"presence_penalty": value -3 is outside the allowed domain [-2, 2]'),
    ('{"n": 0}', '"n": value 0 is outside the allowed domain [1, 128]'),
    ('{"n": 129}', '"n": value 129 is outside the allowed domain [1, 128]'),
    ('{"n": 1.5}', '"n": value 1.5 must be a whole number ([1, 128])'),
    ('{"top_k": 40.5}', '"top_k": value 40.5 must be a whole number (>= 1, or exactly -1)'),
    (
        '{"top_k": {"min": 1.5, "max": 4}}',
        '"top_k": band min 1.5 must be a whole number (>= 1, or exactly -1)',
    ),
    (
        '{"top_k": 1e19}',
        '"top_k": value 10000000000000000000 is too large to forward (must be below 2^63)',
    ),
    (
        '{"top_k": 9223372036854775808}',
        '"top_k": value 9223372036854775808 is too large to forward (must be below 2^63)',
    ),
    (
        '{"top_k": 9007199254740993}',
        '"top_k": value 9007199254740993 is not exactly representable as a 64-bit float',
    ),
    ('{"top_k": Infinity}', '"top_k": value inf is too large to forward'),
    (
        '{"temperature": {"min": 0, "max": 1, "default": 1.5}}',
        '"temperature": band default 1.5 is outside the band [0, 1]',
    ),
    (
        '{"temperature": {"min": 0, "max": 3}}',
        '"temperature": band max 3 is outside the allowed domain [0, 2]',
    ),
]


@pytest.mark.parametrize(("text", "message"), REFUSALS)
def test_refusal_message(text: str | bytes, message: str) -> None:
    """Each refused contract raises ContractError with the pinned message."""
    with pytest.raises(ContractError) as exc:
        parse_contract_json(text)
    assert str(exc.value) == message


def test_refusal_names_the_field() -> None:
    """A refusal about one key carries that key in ``field``."""
    with pytest.raises(ContractError) as exc:
        parse_contract_json('{"top_p": 0.5, "n": 1.5}')
    assert exc.value.field == "n"


def test_band_under_allow_is_refused() -> None:
    """A band needs the reject policy."""
    with pytest.raises(ContractError) as exc:
        parse_contract_json('{"temperature": {"min": 0, "max": 1}}', "allow")
    assert str(exc.value) == (
        '"temperature": a band requires conflict policy reject (this contract\'s policy is allow)'
    )


def test_seed_example_parses_in_field_order() -> None:
    """SPEC's example parses; params come back in §2 order whatever the JSON order."""
    c = parse_contract_json(
        '{"top_k": {"min": 1, "max": 50, "default": 40}, "top_p": 0.95, "temperature": 1}'
    )
    assert list(c.params) == ["temperature", "top_p", "top_k"]
    assert c.params["temperature"] == Exact(1.0)
    assert c.params["top_k"] == Band(1, 50, 40)
    assert c.conflict is ConflictPolicy.REJECT


def test_integral_fields_are_stored_as_integers() -> None:
    """{"n": 1.0} is stored as the integer 1, a float field keeps a float."""
    c = parse_contract_json('{"n": 1.0, "top_k": -1, "temperature": 1}')
    assert type(c.params["n"].value) is int and c.params["n"] == Exact(1)  # type: ignore[union-attr]
    assert type(c.params["top_k"].value) is int and c.params["top_k"] == Exact(-1)  # type: ignore[union-attr]
    assert type(c.params["temperature"].value) is float  # type: ignore[union-attr]


def test_domain_edges_are_inclusive_where_the_spec_says() -> None:
    """Closed ends of §2's domains are accepted, the largest forwardable top_k (2^63 - 1024) too."""
    c = parse_contract_json(
        '{"temperature": 0, "top_p": 1, "top_k": 9223372036854774784, "min_p": 0, '
        '"repetition_penalty": 2, "frequency_penalty": -2, "presence_penalty": 2, "n": 128}'
    )
    assert len(c.params) == 8


def test_allow_policy_and_parse_conflict() -> None:
    """The conflict policy is "reject" or "allow"; anything else is refused with its value."""
    assert parse_contract_json('{"n": 1}', "allow").conflict is ConflictPolicy.ALLOW
    assert parse_conflict("reject") is ConflictPolicy.REJECT
    with pytest.raises(ContractError, match='conflict policy must be reject or allow, got "deny"'):
        parse_conflict("deny")


def test_validate_normalises_hand_built_values() -> None:
    """validate() runs the parser's checks on hand-built values and normalises integral ones."""
    c = validate(SamplingContract({"n": Exact(2.0), "temperature": Band(0, 1, 0.5)}))
    assert c.params["n"] == Exact(2) and type(c.params["n"].value) is int  # type: ignore[union-attr]
    with pytest.raises(ContractError, match="outside the allowed domain"):
        validate(SamplingContract({"top_p": Exact(float("nan"))}))
    with pytest.raises(ContractError, match="is empty"):
        validate(SamplingContract({}))
    with pytest.raises(ContractError, match="requires conflict policy reject"):
        validate(SamplingContract({"top_p": Band(0.5, 1)}, ConflictPolicy.ALLOW))
    with pytest.raises(ContractError, match="not a number"):
        validate(SamplingContract({"top_p": Exact(True)}))


def test_unknown_key_in_hand_built_contract() -> None:
    """A hand-built contract with an unknown key is refused on construction."""
    with pytest.raises(ContractError, match="unknown parameter"):
        SamplingContract({"max_tokens": Exact(1)})
