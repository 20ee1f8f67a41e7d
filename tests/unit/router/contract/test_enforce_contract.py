"""Enforcement (SPEC §3.3): the action table per policy, every violation, the exact messages."""

from __future__ import annotations

import pytest

from controlplane.contracts import parse_contract_json
from dataplane.errors import SamplingContractViolation, error_body
from dataplane.router.contract.dialects import CHAT, GENERATE
from dataplane.router.contract.enforce import compile_contract, enforce
from dataplane.router.contract.probe import probe_body

SEED = '{"temperature": 1, "top_p": 0.95, "top_k": {"min": 1, "max": 50}, "n": 1}'


def _run(contract: str, body: bytes, conflict: str = "reject", generate: bool = False) -> bytes:
    compiled = compile_contract(parse_contract_json(contract, conflict), scope="*", revision=7)
    return enforce(compiled, probe_body(body, GENERATE if generate else CHAT), body)


def _violation(contract: str, body: bytes) -> SamplingContractViolation:
    with pytest.raises(SamplingContractViolation) as exc:
        _run(contract, body)
    return exc.value


P = "violates this deployment's sampling contract: "

MESSAGES = [
    (b'{"temperature": 0.5}', "temperature", f"temperature {P}got 0.5, expected 1 (or omit the field)"),
    (
        b'{"temperature": "abc"}',
        "temperature",
        f"temperature {P}expected 1 (or omit the field), got a non-numeric value",
    ),
    (b'{"top_p": 1}', "top_p", f"top_p {P}got 1, expected 0.95 (or omit the field)"),
    (b'{"top_k": 51}', "top_k", f"top_k {P}must be between 1 and 50, got 51"),
    (b'{"top_k": -1}', "top_k", f"top_k {P}must be between 1 and 50, got -1"),
    (b'{"top_k": [40]}', "top_k", f"top_k {P}must be a number between 1 and 50, got a non-numeric value"),
    (b'{"top_k": "1e0"}', "top_k", f"top_k {P}must be a number between 1 and 50, got a non-numeric value"),
    (b'{"n": 2.0}', "n", f"n {P}got 2, expected 1 (or omit the field)"),
    (b'{"n": 1.5}', "n", f"n {P}expected 1 (or omit the field), got a non-numeric value"),
    (b'{"temperature": "nan"}', "temperature", f"temperature {P}got NaN, expected 1 (or omit the field)"),
    (
        b'{"temperature": 1e-7}',
        "temperature",
        f"temperature {P}got 0.0000001, expected 1 (or omit the field)",
    ),
    (
        b'{"temperature": 1e400}',
        "temperature",
        f"temperature {P}expected 1 (or omit the field), got a non-numeric value",
    ),
]


@pytest.mark.parametrize(("body", "param", "message"), MESSAGES)
def test_violation_messages(body: bytes, param: str, message: str) -> None:
    """Each violation names the field and says what was expected, as SPEC §3.3 words it."""
    err = _violation(SEED, body)
    assert (err.param, err.message, err.status, err.code) == (
        param,
        message,
        400,
        "sampling_contract_violation",
    )


def test_repeated_violations_are_worded_as_the_first_time() -> None:
    """A value met again is answered with the same words and envelope (remembered, not rendered
    again); 0 and -0.0, equal as numbers, keep their own spelling (-0 is the integer 0); the same value under another
    contract is judged against that one."""
    band = '{"temperature": {"min": 0.5, "max": 1.5}}'
    for _ in range(2):
        for value, got in ((b"-0.0", "-0"), (b"0", "0"), (b"-0", "0"), (b"-0.0", "-0"), (b"0.25", "0.25")):
            err = _violation(band, b'{"temperature": %s}' % value)
            assert err.message == f"temperature {P}must be between 0.5 and 1.5, got {got}"
            assert f'got {got}"'.encode() in error_body(err)
        err = _violation(SEED, b'{"temperature": 0.25}')
        assert err.message == f"temperature {P}got 0.25, expected 1 (or omit the field)"
        assert b"got 0.25, expected 1" in error_body(err)


def test_first_violation_reported_every_violation_listed() -> None:
    """The client hears of the first violated field in §2 order; every violated field is listed."""
    err = _violation(SEED, b'{"n": 3, "top_k": 99, "temperature": 0, "top_p": 0.95}')
    assert err.param == "temperature" and err.violated == ("temperature", "top_k", "n")
    assert error_body(err).startswith(
        b'{"error":{"type":"invalid_request_error","code":"sampling_contract_violation","param":"temperature",'
    )


def test_equal_values_pass_in_any_spelling() -> None:
    """Values equal to the contract pass untouched: "0.95" is 0.95, true is n=1, 1.0 is 1."""
    body = b'{"temperature": 1.0, "top_p": " 0.95 ", "top_k": "4_0", "n": true}'
    assert _run(SEED, body) is body


def test_exact_values_are_injected_when_absent_or_null() -> None:
    """Absent or null: the exact value is appended, integral ones as integers."""
    assert _run(SEED, b'{"model":"m"}') == b'{"model":"m","temperature":1.0,"top_p":0.95,"n":1}'
    assert _run('{"n": 1.0}', b'{"n": null}') == b'{"n": null,"n":1}'


def test_one_compiled_contract_injects_what_each_body_lacks() -> None:
    """A snapshot serves every request: each body gets the pairs it lacks, whatever the bodies
    before it lacked (with or without a comma before them), in §2 order."""
    compiled = compile_contract(parse_contract_json(SEED), scope="*", revision=1)
    cases = [
        (b'{"model":"m"}', b'{"model":"m","temperature":1.0,"top_p":0.95,"n":1}'),
        (b'{"top_p":0.95}', b'{"top_p":0.95,"temperature":1.0,"n":1}'),
        (b"{}", b'{"temperature":1.0,"top_p":0.95,"n":1}'),
        (b'{"n":1,"temperature":1}', b'{"n":1,"temperature":1,"top_p":0.95}'),
        (b'{"model":"m"}', b'{"model":"m","temperature":1.0,"top_p":0.95,"n":1}'),
        (b"{ }", b'{ "temperature":1.0,"top_p":0.95,"n":1}'),
        (b'{"top_p":0.95}', b'{"top_p":0.95,"temperature":1.0,"n":1}'),
    ]
    for body, forwarded in cases * 2:
        assert enforce(compiled, probe_body(body, CHAT), body) == forwarded
    every = b'{"temperature":1,"top_p":0.95,"n":1}'
    assert enforce(compiled, probe_body(every, CHAT), every) is every


def test_band_injects_its_default_only() -> None:
    """A band without default passes an absent field; with one, injects the default."""
    assert _run('{"top_k": {"min": 1, "max": 50}}', b"{}") == b"{}"
    assert _run('{"top_k": {"min": 1, "max": 50, "default": 40}}', b"{}") == b'{"top_k":40}'
    assert _run('{"min_p": {"min": 0, "max": 0.5, "default": 0.5}}', b"{ }") == b'{ "min_p":0.5}'


def test_band_edges_are_inclusive() -> None:
    """Both ends of a band pass."""
    for body in (b'{"top_k": 1}', b'{"top_k": 50}'):
        assert _run('{"top_k": {"min": 1, "max": 50}}', body) is body


def test_allow_passes_client_values_unchanged() -> None:
    """Under allow a different or unusable value passes unchanged; absent ones are still injected."""
    body = b'{"temperature": 0.2, "top_p": "x"}'
    assert _run('{"temperature": 1, "top_p": 0.95}', body, "allow") is body
    assert (
        _run('{"temperature": 1, "n": 1}', b'{"temperature": 0.2}', "allow") == b'{"temperature": 0.2,"n":1}'
    )


def test_generate_injects_under_sampling_params() -> None:
    """/generate: the pairs go inside sampling_params, created when absent or null."""
    assert _run('{"temperature": 1}', b'{"text":"hi"}', generate=True) == (
        b'{"text":"hi","sampling_params":{"temperature":1.0}}'
    )
    out = _run('{"temperature": 1}', b'{"sampling_params":{"max_new_tokens":8}}', generate=True)
    assert (
        out
        == b'{"sampling_params":{"max_new_tokens":8},"sampling_params":{"max_new_tokens":8,"temperature":1.0}}'
    )
    with pytest.raises(SamplingContractViolation):
        _run('{"temperature": 1}', b'{"temperature":1,"sampling_params":{"temperature":0}}', generate=True)


def test_compiled_contract_keeps_scope_and_revision() -> None:
    """The compiled form says which snapshot it came from."""
    compiled = compile_contract(parse_contract_json(SEED), scope="llama", revision=42)
    assert (compiled.scope, compiled.revision) == ("llama", 42)
    assert [r.name for r in compiled.rules] == ["temperature", "top_p", "top_k", "n"]
