"""SPEC §3.3 contract cases through a real router, observed at the engine (x-sim-sampling-params)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL, chat, engine_read, error_of, post
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess, series

CONTRACT = {"temperature": 0.5, "top_p": 0.9, "top_k": {"min": 1, "max": 50, "default": 40}, "n": 1}


@pytest.fixture(scope="module")
def sim() -> Iterator[EngineSim]:
    with EngineSim("--model", MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def reject_router(sim: EngineSim) -> Iterator[RouterProcess]:
    with RouterProcess("--worker", sim.url, "--override-sampling-params", json.dumps(CONTRACT)) as r:
        yield r


@pytest.fixture(scope="module")
def allow_router(sim: EngineSim) -> Iterator[RouterProcess]:
    flags = ("--override-sampling-params", '{"temperature": 0.5}', "--sampling-param-conflict", "allow")
    with RouterProcess("--worker", sim.url, *flags) as r:
        yield r


def _answer_seq(body: bytes) -> int:
    # engine-sim ids are a process prefix (8 hex digits) + a counter of generated answers.
    return int(json.loads(body)["id"].split("-", 1)[1][8:], 16)


def test_absent_fields_are_injected(reject_router: RouterProcess) -> None:
    """Exact values and a band default reach the engine when the client omits them."""
    status, headers, _ = post(reject_router.url, "/v1/chat/completions", chat())
    assert status == 200
    assert headers["x-contract-revision"] == "0"
    read = engine_read(headers)
    assert (read["temperature"], read["top_p"], read["top_k"], read["n"]) == (0.5, 0.9, 40, 1)


def test_null_is_absent_and_injected(reject_router: RouterProcess) -> None:
    """A JSON null counts as absent: the contract value wins at the engine."""
    status, headers, _ = post(reject_router.url, "/v1/chat/completions", chat(temperature=None, top_k=None))
    assert status == 200
    assert engine_read(headers)["temperature"] == 0.5
    assert engine_read(headers)["top_k"] == 40


def test_matching_and_in_band_values_pass(reject_router: RouterProcess) -> None:
    """Equal exact values (also as numeric strings) and in-band values pass unchanged."""
    status, headers, _ = post(reject_router.url, "/v1/chat/completions", chat(temperature="0.5", top_k=7))
    assert status == 200
    assert engine_read(headers)["temperature"] == 0.5
    assert engine_read(headers)["top_k"] == 7


def test_completions_and_generate_are_judged(reject_router: RouterProcess) -> None:
    """/v1/completions (top level) and /generate (under sampling_params) get the same injection."""
    status, headers, _ = post(
        reject_router.url, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    )
    assert status == 200 and engine_read(headers)["temperature"] == 0.5
    status, headers, _ = post(
        reject_router.url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    )
    assert status == 200 and engine_read(headers)["top_k"] == 40
    status, headers, body = post(
        reject_router.url, "/generate", {"text": "hi", "sampling_params": {"temperature": 1.5}}
    )
    assert error_of(status, headers, body)[1] == "sampling_contract_violation"


def test_violation_is_refused_before_reaching_the_engine(reject_router: RouterProcess) -> None:
    """A violating request gets the SPEC §3.3 envelope and never reaches the engine."""
    status, headers, body = post(reject_router.url, "/v1/chat/completions", chat())
    before = _answer_seq(body)
    for bad in (
        chat(temperature=0.7),
        chat(top_k=99),
        chat(top_p="abc"),
        chat(temperature=[0.5]),
        chat(temperature=0.5, temperature_=1) | {"n": 2},
    ):
        status, headers, body = post(reject_router.url, "/v1/chat/completions", bad)
        code, err = error_of(status, headers, body)[1:]
        assert (status, code) == (400, "sampling_contract_violation")
        assert headers["x-contract-revision"] == "0"
        assert "violates this deployment's sampling contract" in err["message"]
    status, headers, body = post(reject_router.url, "/v1/chat/completions", chat())
    assert _answer_seq(body) == before + 1  # nothing reached the engine in between


def test_first_violation_is_reported_and_every_one_counted(reject_router: RouterProcess) -> None:
    """The first violated field in §2 order is named; every violated field is counted."""
    before = reject_router.metrics()
    status, headers, body = post(reject_router.url, "/v1/chat/completions", chat(top_k=99, temperature=2))
    err = error_of(status, headers, body)[2]
    assert err["param"] == "temperature"
    assert err["message"] == (
        "temperature violates this deployment's sampling contract: got 2, expected 0.5 (or omit the field)"
    )
    after = reject_router.metrics()
    for param in ("temperature", "top_k"):
        key = series("fleetplane_sampling_contract_rejections_total", scope="*", param=param)
        assert after[key] - before.get(key, 0) == 1


def test_repeated_key_last_wins_like_the_engine(reject_router: RouterProcess) -> None:
    """A repeated sampling key is judged by its last value, as the engine reads it."""
    raw = b'{"model":"sim-model","messages":[],"max_tokens":1,"temperature":0.5,"temperature":0.9}'
    status, headers, body = post(reject_router.url, "/v1/chat/completions", raw)
    assert error_of(status, headers, body)[1] == "sampling_contract_violation"
    raw = b'{"model":"sim-model","messages":[],"max_tokens":1,"temperature":0.9,"temperature":0.5}'
    status, headers, _ = post(reject_router.url, "/v1/chat/completions", raw)
    assert status == 200 and engine_read(headers)["temperature"] == 0.5


def test_allow_passes_client_values_and_injects_absent(allow_router: RouterProcess) -> None:
    """Under allow, a different client value passes unchanged; an absent one is injected."""
    status, headers, _ = post(allow_router.url, "/v1/chat/completions", chat(temperature=1.3))
    assert status == 200 and engine_read(headers)["temperature"] == 1.3
    status, headers, _ = post(allow_router.url, "/v1/chat/completions", chat())
    assert status == 200 and engine_read(headers)["temperature"] == 0.5


def test_contract_endpoint_shows_the_applied_set(reject_router: RouterProcess) -> None:
    """GET /contract lists the flags' contract as scope * at revision 0."""
    status, _, body = reject_router.get("/contract")
    assert status == 200
    doc = json.loads(body)
    assert doc["revision"] == 0
    assert doc["contracts"]["*"]["conflict"] == "reject"
    assert doc["contracts"]["*"]["params"]["top_k"] == {"min": 1, "max": 50, "default": 40}


def test_path_spelling_cannot_escape_the_contract(reject_router: RouterProcess) -> None:
    """Percent-encoded, dotted or slashed spellings of a judged path are judged too."""
    for path in (
        "/v1/chat%2Fcompletions",
        "/v1//chat/completions/",
        "/v1/x/../chat/completions",
        "/v1/%63hat/completions",
    ):
        status, headers, body = post(reject_router.url, path, chat(temperature=1.9))
        assert error_of(status, headers, body)[1] == "sampling_contract_violation", path
