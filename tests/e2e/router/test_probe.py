"""The three-state probe and the contract on odd bodies, through a real router and engine (SPEC §3.3, §4).

Contract (``CONTRACT``): temperature exactly 0.5; top_p a band [0.1, 0.9] with default 0.8;
top_k a band [1, 50] without default; n exactly 1; policy reject.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.raw_http import engine_read, envelope, request
from tests.fakes.router import RouterProcess

HEAD = b'"model":"audit-model","prompt":"x","max_tokens":1'
INJECTED = {"temperature": 0.5, "top_p": 0.8, "n": 1}

# (fragment appended to HEAD, what the engine must read) for bodies that pass.
PASSING: list[tuple[bytes, dict[str, Any]]] = [
    (b"", INJECTED),
    (b',"temperature":null,"n":null,"top_p":null', INJECTED),
    (b',"temperature":"  0.5  "', INJECTED),
    (b',"temperature":5E-1,"n":1.0,"top_p":"0.9"', {"temperature": 0.5, "n": 1, "top_p": 0.9}),
    (b',"n":"1","top_k":"5"', {"n": 1, "top_k": 5}),
    (b',"n":" 1 "', {"n": 1}),
    (b',"n":"1.0"', {"n": 1}),
    (b',"n":true', {"n": 1}),
    (b',"n":"+1"', {"n": 1}),
    (b',"top_k":"1_0"', {"top_k": 10}),
    (b',"top_k":5.0', {"top_k": 5}),
    (b',"top_p":"0.1_5"', {"top_p": 0.15}),
    (b',"temperature":0.9,"temperature":0.5', INJECTED),
    (b',"\\u0074emperature":0.5', INJECTED),
    (b',"sampling_params":{"temperature":9}', INJECTED),
    (b',"extra":{"temperature":9,"n":7}', INJECTED),
]

# (fragment, the param reported, the message's detail) for bodies refused with 400.
REFUSED: list[tuple[bytes, str, str]] = [
    (b',"temperature":-0', "temperature", "got 0, expected 0.5 (or omit the field)"),
    (b',"temperature":-0.0', "temperature", "got -0, expected 0.5 (or omit the field)"),
    (b',"temperature":1E+2', "temperature", "got 100, expected 0.5 (or omit the field)"),
    (b',"temperature":1e400', "temperature", "expected 0.5 (or omit the field), got a non-numeric value"),
    (b',"temperature":"1e400"', "temperature", "got inf, expected 0.5 (or omit the field)"),
    (b',"temperature":"1_0"', "temperature", "got 10, expected 0.5 (or omit the field)"),
    (b',"temperature":"0x10"', "temperature", "expected 0.5 (or omit the field), got a non-numeric value"),
    (b',"temperature":" 0_5 "', "temperature", "expected 0.5 (or omit the field), got a non-numeric value"),
    (b',"temperature":[0.5]', "temperature", "expected 0.5 (or omit the field), got a non-numeric value"),
    (
        b',"temperature":{"value":0.5}',
        "temperature",
        "expected 0.5 (or omit the field), got a non-numeric value",
    ),
    (
        b',"temperature":"' + b"0" * 63 + b'.5"',
        "temperature",
        "expected 0.5 (or omit the field), got a non-numeric value",
    ),
    (b',"temperature":0.5,"temperature":0.7', "temperature", "got 0.7, expected 0.5 (or omit the field)"),
    (b',"temp\\u0065rature":0.7', "temperature", "got 0.7, expected 0.5 (or omit the field)"),
    (b',"top_p":"nan"', "top_p", "must be between 0.1 and 0.9, got NaN"),
    (b',"top_p":0.95', "top_p", "must be between 0.1 and 0.9, got 0.95"),
    (b',"top_p":"abc"', "top_p", "must be a number between 0.1 and 0.9, got a non-numeric value"),
    (b',"top_k":-1', "top_k", "must be between 1 and 50, got -1"),
    (b',"top_k":5.5', "top_k", "must be a number between 1 and 50, got a non-numeric value"),
    (b',"top_k":"1e1"', "top_k", "must be a number between 1 and 50, got a non-numeric value"),
    (b',"n":"true"', "n", "expected 1 (or omit the field), got a non-numeric value"),
    (b',"n":false', "n", "got 0, expected 1 (or omit the field)"),
    (b',"n":"1e0"', "n", "expected 1 (or omit the field), got a non-numeric value"),
    (b',"n":9007199254740993', "n", "expected 1 (or omit the field), got a non-numeric value"),
    (b',"n":2,"temperature":0.7,"top_p":2', "temperature", "got 0.7, expected 0.5 (or omit the field)"),
]


@pytest.mark.parametrize(("fragment", "reads"), PASSING)
def test_passing_bodies_reach_the_engine_with_the_contract_values(
    router: RouterProcess, fragment: bytes, reads: dict[str, Any]
) -> None:
    """Bodies the contract accepts are served; the engine reads the contracted or sent values."""
    answer = request(router, "POST", "/v1/completions", b"{" + HEAD + fragment + b"}")
    assert answer.status == 200, answer.body
    read = engine_read(answer)
    assert {k: read[k] for k in reads} == reads


@pytest.mark.parametrize(("fragment", "param", "detail"), REFUSED)
def test_refused_bodies_name_the_first_violation(
    router: RouterProcess, fragment: bytes, param: str, detail: str
) -> None:
    """Violations are 400 sampling_contract_violation naming the first field in §2 order."""
    answer = request(router, "POST", "/v1/completions", b"{" + HEAD + fragment + b"}")
    assert answer.status == 400
    err = envelope(answer)
    assert (err["code"], err["param"]) == ("sampling_contract_violation", param)
    assert err["message"] == f"{param} violates this deployment's sampling contract: {detail}"
    assert "x-sim-sampling-params" not in answer.headers


@pytest.mark.parametrize(
    "body",
    [
        b"\xef\xbb\xbf{" + HEAD + b"}",
        b"{" + HEAD + b"} x",
        b"{" + HEAD + b"}{}",
        b"[{" + HEAD + b"}]",
        b"",
        b"null",
        b'"{}"',
        b"{" + HEAD + b',"temperature":NaN}',
        b"{" + HEAD + b',"temperature":Infinity}',
        b"{" + HEAD + b',"x":"\\ud800"}',
        b"{" + HEAD + b',"max_tokens":2}',
        b"{" + HEAD + b',"\\u006dodel":"audit-model"}',
        b"{" + HEAD + b',"stream":null,"stream":true}',
        b"{" + HEAD + b',"stream":"maybe"}',
        b'{"model":7,"prompt":"x"}',
    ],
)
def test_malformed_bodies_are_bad_request(router: RouterProcess, body: bytes) -> None:
    """Non-objects, JSON the engine would not read the same way, and repeated routing keys are
    400 bad_request before any contract check."""
    answer = request(router, "POST", "/v1/completions", body)
    assert answer.status == 400
    assert envelope(answer)["code"] == "bad_request"


def test_trailing_and_leading_whitespace_is_fine(router: RouterProcess) -> None:
    """JSON whitespace around the object is allowed; the injection still lands inside it."""
    answer = request(router, "POST", "/v1/completions", b" \r\n\t{" + HEAD + b"} \r\n\t ")
    assert answer.status == 200
    assert engine_read(answer)["temperature"] == 0.5


def test_generate_reads_the_fields_under_sampling_params(router: RouterProcess) -> None:
    """/generate judges sampling_params.*: top-level fields are not sampling fields there."""
    ok = request(
        router, "POST", "/generate", b'{"text":"x","temperature":9,"sampling_params":{"max_new_tokens":1}}'
    )
    assert ok.status == 200
    assert engine_read(ok)["temperature"] == 0.5
    bad = request(router, "POST", "/generate", b'{"text":"x","sampling_params":{"n":2}}')
    assert (bad.status, envelope(bad)["param"]) == (400, "n")
    for odd in (b"[]", b'"{}"', b"1", b"true"):
        refused = request(router, "POST", "/generate", b'{"text":"x","sampling_params":' + odd + b"}")
        assert refused.status == 400
        assert envelope(refused)["code"] == "bad_request"
