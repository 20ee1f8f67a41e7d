"""Numeric reading of the probe (SPEC §4) against pydantic itself: the expected column of every
table is computed by running pydantic on the same input, never typed by hand."""

from __future__ import annotations

import json
import math

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.contracts import FIELDS
from dataplane.router.contract.coercion import str_as_bool, str_as_float, str_as_int
from dataplane.router.contract.probe import ABSENT, NUMBER, UNUSABLE, probe_body
from tests.fakes.sampling import OptionalFloat, OptionalInt, PlainFloat, PlainInt, pydantic_reads

FLOAT_FIELDS = [f.name for f in FIELDS if not f.integral]
INT_FIELDS = [f.name for f in FIELDS if f.integral]

# Strings clients send for numbers: the seed router's pinned table (reference A.4) plus the
# int-specific and whitespace cases of reference B.
STRINGS = [
    # pydantic reads these as floats
    "1_0",
    "1_000.5",
    "0.5_0",
    "1_0.5_0",
    "0.5e1_0",
    "1_2_3",
    "0_1",
    "-1_0",
    "+1_0",
    "1_0e1_0",
    "1._5",
    "1_.5",
    "1e_5",
    "1_e5",
    "-_1",
    "+_1",
    "._5",
    "-_.5",
    "1_._5",
    "+_.5",
    "1_.",
    "1_0e_1_0",
    "0.5",
    "  1.5  ",
    "1e-1",
    "+1.5",
    ".5",
    "1.",
    "-0",
    "1E5",
    "inf",
    "-inf",
    "Infinity",
    "-Infinity",
    "nan",
    "NaN",
    "+nan",
    "1e400",
    "iNfInItY",
    "0.95",
    "1",
    "40",
    "1.0",
    "1.00",
    "01",
    "00.0",
    "-0.0",
    # and refuses these
    "_1",
    "1_",
    "1__0",
    "_",
    "__",
    "._",
    "-_",
    "_.5",
    "1e5_",
    "_1.5",
    "1.5_",
    "0_x10",
    " 1_0 ",
    "_ 1",
    "1 _0",
    " __1 ",
    "\t1_0\n",
    "0x10",
    "0b101",
    "0o17",
    "1,5",
    "1.5f",
    "",
    " ",
    "abc",
    "true",
    "1e",
    "e5",
    ".",
    "+",
    "-",
    "+-1",
    "--1",
    "-+1",
    "infinit",
    "nana",
    "1.5.5",
    # whitespace: Rust's trim() is Unicode White_Space (NBSP, ideographic space), not U+001C
    "\xa01.5\xa0",
    "\u30001\u3000",
    "\x1c1\x1c",
    "\u20281",
    "\x851",
    # int-specific: trimmed before underscore stripping, whole decimals, leading zeros, signs
    "  1_0",
    "1_0  ",
    "0_0",
    "000",
    "+0",
    "-00",
    "0_1.0",
    "1.0_0",
    "10.000",
    "-1.0",
    "1.5",
    "1e0",
    "9007199254740993",
    "9223372036854775808",
    "-9223372036854775809",
    "1" * 30,
    # non-ASCII digits are not digits for Rust
    "\u0661",
    "\uff11",
    # length: 64 characters read, 65 unusable
    "1" * 64,
    "1" * 65,
    " " * 63 + "1",
    " " * 64 + "1",
    "1" + "_0" * 32,
]


def _expected(model_optional: type, model_plain: type, value: object) -> object:
    optional = pydantic_reads(model_optional, value)
    plain = pydantic_reads(model_plain, value)
    assert optional == plain or (isinstance(plain, float) and math.isnan(plain))  # same rule
    return optional


def _probe_one(name: str, literal: str) -> tuple[int, float]:
    probe = probe_body(f'{{"{name}": {literal}}}'.encode())
    index = next(f.index for f in FIELDS if f.name == name)
    return probe.states[index], probe.values[index]


def _assert_reads(state: int, value: float, engine: object, *, exact_only: bool) -> None:
    if engine == "error":
        assert state == UNUSABLE
        return
    assert isinstance(engine, int | float)
    if state == UNUSABLE:
        # Fail closed where the router cannot compare doubles exactly: ints past 2^53.
        assert not exact_only and isinstance(engine, int) and float(engine) != engine
        return
    assert state == NUMBER
    assert (math.isnan(value) and math.isnan(engine)) or value == engine


@pytest.mark.parametrize("text", STRINGS)
def test_float_fields_read_strings_as_pydantic_does(text: str) -> None:
    """A string in a float field reads as pydantic's float rule reads it (64 characters at most)."""
    engine = "error" if len(text) > 64 else _expected(OptionalFloat, PlainFloat, text)
    for name in FLOAT_FIELDS:
        state, value = _probe_one(name, json.dumps(text))
        _assert_reads(state, value, engine, exact_only=True)


@pytest.mark.parametrize("text", STRINGS)
def test_int_fields_read_strings_as_pydantic_does(text: str) -> None:
    """A string in top_k or n reads as pydantic's int rule reads it ("1.0" is 1, "1e0" refused)."""
    engine = "error" if len(text) > 64 else _expected(OptionalInt, PlainInt, text)
    for name in INT_FIELDS:
        state, value = _probe_one(name, json.dumps(text))
        _assert_reads(state, value, engine, exact_only=False)


LITERALS = [
    "true",
    "false",
    "0",
    "-0",
    "-0.0",
    "1",
    "1.0",
    "1.5",
    "2.0",
    "1e0",
    "1E2",
    "0.95",
    "1e-400",
    "1e400",
    "-1e400",
    "1e19",
    "9.2e18",
    "9223372036854775807",
    "9223372036854775808",
    "9007199254740993",
    "9007199254740992",
    "1" + "0" * 40,
    "0.1000000000000000055511151231257827",
    "[]",
    "[1]",
    "{}",
    '{"a": 1}',
    "[0.5]",
]


@pytest.mark.parametrize("literal", LITERALS)
def test_json_values_read_as_the_engine_reads_them(literal: str) -> None:
    """Non-string JSON values: the router's number is the engine's (json.loads then pydantic), or
    the router fails closed (unusable) where it could not read it exactly."""
    parsed = json.loads(literal)
    for f in FIELDS:
        model = (OptionalInt, PlainInt) if f.integral else (OptionalFloat, PlainFloat)
        engine = _expected(model[0], model[1], parsed)
        state, value = _probe_one(f.name, literal)
        if state == NUMBER:
            assert value == engine, (f.name, literal, value, engine)
        else:
            assert state == UNUSABLE
            # Only where the engine refuses, or reads a value the router cannot compare
            # exactly: infinities from out-of-range literals, integer literals past 2^53.
            inexact_int = type(parsed) is int and float(parsed) != parsed
            assert engine == "error" or math.isinf(float(engine)) or inexact_int, engine


def test_null_is_absent_for_every_field() -> None:
    """null is absent, Optional field or not (the router injects over it)."""
    for f in FIELDS:
        assert _probe_one(f.name, "null")[0] == ABSENT


class _OptionalBool(pydantic.BaseModel):
    x: bool | None = None


_PIECES = st.sampled_from(
    [
        *list("0123456789_.eE+- \txtyfnoTYFNO"),
        "inf",
        "nan",
        "Infinity",
        "on",
        "off",
        "true",
        "yes",
        "\xa0",
        "\u3000",
        "\x1c",
        "١",
        "00",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_PIECES, max_size=8).map("".join))
def test_string_rules_match_pydantic_on_random_strings(text: str) -> None:
    """str_as_float / str_as_int / str_as_bool agree with pydantic on random numeric-looking strings."""
    f = pydantic_reads(OptionalFloat, text)
    mine_f = str_as_float(text)
    assert (f == "error" and mine_f is None) or (
        isinstance(f, float)
        and mine_f is not None
        and (mine_f == f or (math.isnan(f) and math.isnan(mine_f)))
    ), (text, f, mine_f)
    i = pydantic_reads(OptionalInt, text)
    assert (i == "error" and str_as_int(text) is None) or i == str_as_int(text), (text, i)
    b = pydantic_reads(_OptionalBool, text)
    assert (b == "error" and str_as_bool(text) is None) or b == str_as_bool(text), (text, b)
