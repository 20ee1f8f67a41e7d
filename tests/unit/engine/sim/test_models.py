"""The sim's request models read bodies as SGLang's pydantic models do (SPEC §2, reference B)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from dataplane.engine.sim.models import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    sampling_values,
    verify_sampling,
)

MSG = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": MSG, **fields})


@pytest.mark.parametrize(
    ("field", "raw", "read"),
    [
        ("temperature", "0.5", 0.5),
        ("temperature", " 1.5 ", 1.5),
        ("temperature", "1_0", 10.0),
        ("temperature", "1._5", 1.5),
        ("temperature", True, 1.0),
        ("temperature", "inf", math.inf),
        ("top_k", "01", 1),
        ("top_k", " 1_0 ", 10),
        ("top_k", "1.0", 1),
        ("top_k", 1.0, 1),
        ("top_k", False, 0),
        ("n", "-0", 0),
        ("frequency_penalty", "+_1", 1.0),
    ],
)
def test_lax_coercions_match_the_engine(field: str, raw: Any, read: Any) -> None:
    """Strings, bools and whole floats are read as pydantic lax mode reads them (reference B table)."""
    value = getattr(chat(**{field: raw}), field)
    assert value == read and type(value) is type(read)


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("temperature", " 1_0 "),
        ("temperature", "1__0"),
        ("temperature", "0x10"),
        ("temperature", [1]),
        ("top_k", "1e5"),
        ("top_k", 1.5),
        ("top_k", math.inf),
        ("n", None),
        ("frequency_penalty", None),
    ],
)
def test_values_the_engine_refuses(field: str, raw: Any) -> None:
    """Values the engine's pydantic refuses are validation errors here too."""
    with pytest.raises(ValidationError):
        chat(**{field: raw})


def test_last_repeated_key_wins() -> None:
    """json.loads keeps the last of repeated keys, as the engine reads them."""
    data = json.loads('{"messages": [], "top_p": 0.1, "top_p": 0.9}')
    assert ChatCompletionRequest.model_validate(data).top_p == 0.9


def test_defaults_per_endpoint() -> None:
    """Chat leaves five fields None; completions and /generate have plain defaults."""
    assert sampling_values(chat()) == {
        "temperature": None, "top_p": None, "top_k": None, "min_p": None, "repetition_penalty": None,
        "frequency_penalty": 0.0, "presence_penalty": 0.0, "n": 1,
    }  # fmt: skip
    assert sampling_values(CompletionRequest.model_validate({"prompt": "x"}))["top_k"] == -1
    gen = GenerateRequest.model_validate({"text": "x", "sampling_params": {}})
    assert gen.sampling_params is not None and sampling_values(gen.sampling_params)["top_k"] == 1 << 30


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        ({}, None),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": -1}, None),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"presence_penalty": -3.0}, "presence_penalty"),
        ({"n": 0}, None),  # 0.5.23's verify does not check n
    ],
)
def test_verify_matches_sampling_params_verify(override: dict[str, Any], problem: str | None) -> None:
    """SamplingParams.verify's ranges decide 400s; unset Optional fields take engine defaults."""
    result = verify_sampling({**sampling_values(chat()), **override})
    assert (result is None) if problem is None else (result is not None and problem in result)
