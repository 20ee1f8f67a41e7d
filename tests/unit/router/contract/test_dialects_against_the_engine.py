"""SPEC §3.3's safety invariant on every dialect, against SGLang 0.5.23's own code (the oracle).

Differential property test: for adversarial bodies of each route (repeated and escaped keys,
numeric strings, bools, nulls, huge and non-finite literals, nested containers, batches, forms),
whatever the router forwards under ``reject`` makes the real engine (``tests.fakes.sglang_engine``:
orjson, the route's own pydantic model and conversion, SamplingParams) sample every exact field
with exactly the contracted value and every band field inside its band, or not from the body
at all when the band has no default. Each dialect must also reach every outcome (forwarded,
injected, refused), so the property is never vacuous.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings

from controlplane.contracts import Band, ConflictPolicy, Exact, SamplingContract
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.contract.dialects import DIALECTS, Dialect
from dataplane.router.contract.enforce import compile_contract, enforce
from dataplane.router.contract.form import probe_form
from dataplane.router.contract.probe import probe_body
from tests.fakes import sglang_engine as engine
from tests.fakes.sampling import (
    FORM_CONTENT_TYPE,
    contract_fit,
    contract_hints,
    random_contract,
    random_generate_dialect_body,
    random_ollama_body,
    random_top_level_body,
    random_transcription_body,
    random_vertex_body,
    seeds,
    values_equal,
)

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)

EXAMPLES = 1500

Body = Callable[[random.Random, list[str], list[tuple[str, str]]], bytes]
GENERATORS: dict[str, Body] = {
    "chat": lambda rng, hints, fit: random_top_level_body(rng, "chat", hints, fit),
    "completions": lambda rng, hints, fit: random_top_level_body(rng, "completions", hints, fit),
    "responses": lambda rng, hints, fit: random_top_level_body(rng, "responses", hints, fit),
    "messages": lambda rng, hints, fit: random_top_level_body(rng, "messages", hints, fit),
    "ollama": random_ollama_body,
    "generate": random_generate_dialect_body,
    "vertex": random_vertex_body,
    "transcription": random_transcription_body,
}


def _engine_reads(dialect: Dialect, body: bytes) -> engine.Reading:
    if dialect.form:
        return engine.transcription(body, FORM_CONTENT_TYPE)
    return engine.DIALECTS[dialect.name](body)


def check(contract: SamplingContract, dialect: Dialect, body: bytes) -> str:
    """Assert the invariant for one body on one route; say what happened (for coverage)."""
    compiled = compile_contract(contract, scope="*", revision=1)
    try:
        if dialect.form:
            probe = probe_form(body, FORM_CONTENT_TYPE.encode(), dialect)
        else:
            probe = probe_body(body, dialect)
        forwarded = enforce(compiled, probe, body, "/route")
    except BadRequest:
        return "bad_request"
    except SamplingContractViolation:
        return "violation"  # refused before admission: nothing reaches the engine
    reading = _engine_reads(dialect, bytes(forwarded))
    if isinstance(reading, engine.Refused):
        return "engine_refuses"  # nothing is sampled
    for sampling in reading:
        for name, spec in contract.params.items():
            got = sampling[name]
            sent = got.from_body and got.value is not None
            if isinstance(spec, Exact):
                assert sent and values_equal(float(got.value), float(spec.value)), (name, got, spec, body)
            elif sent:
                assert isinstance(spec, Band) and spec.min <= float(got.value) <= spec.max, (
                    name,
                    got,
                    spec,
                    body,
                )
            else:
                assert isinstance(spec, Band) and spec.default is None, (name, got, spec, body)
    return "forwarded" if forwarded is body else "injected"


def _contract_for(rng: random.Random, dialect: Dialect) -> SamplingContract:
    """A random contract; mostly one the route can serve (its fields only), so that bodies get
    forwarded, sometimes one naming fields the route cannot carry (always refused)."""
    contract = random_contract(rng, ConflictPolicy.REJECT)
    carried = {k: v for k, v in contract.params.items() if k in dialect.carried}
    if carried and rng.randrange(5):
        return SamplingContract(carried, contract.conflict)
    return contract


def run(seed: int, name: str) -> str:
    rng = random.Random(seed)
    dialect = DIALECTS[name]
    contract = _contract_for(rng, dialect)
    return check(contract, dialect, GENERATORS[name](rng, contract_hints(contract), contract_fit(contract)))


@pytest.mark.parametrize("name", sorted(GENERATORS))
@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=seeds())
def test_forwarded_bodies_make_the_engine_sample_contracted_values(name: str, seed: int) -> None:
    """Whatever a body of this route holds, a forwarded one is sampled as the contract says."""
    run(seed, name)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generated_bodies_reach_every_outcome(name: str) -> None:
    """The generators are not vacuous: bodies are forwarded, injected into and refused, per route."""
    counts = Counter(run(seed, name) for seed in range(600))
    assert counts["forwarded"] + counts["injected"] >= 30, counts
    assert counts["injected"] >= 20 and counts["violation"] >= 60, counts


# -- pinned tables: one spelling of the temperature per row, under {"temperature": 1} ------------
WRAP: dict[str, Callable[[bytes], bytes]] = {
    "chat": lambda f: b'{"model":"m","messages":[{"role":"user","content":"hi"}],' + f + b"}",
    "completions": lambda f: b'{"model":"m","prompt":"hi",' + f + b"}",
    "responses": lambda f: b'{"model":"m","input":"hi",' + f + b"}",
    "messages": lambda f: (
        b'{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}],' + f + b"}"
    ),
    "ollama": lambda f: b'{"model":"m","messages":[{"role":"user","content":"hi"}],"options":{' + f + b"}}",
    "generate": lambda f: b'{"text":"hi","sampling_params":{' + f + b"}}",
    "vertex": lambda f: b'{"instances":[{"text":"hi"}],"parameters":{"sampling_params":{' + f + b"}}}",
}
LAX = ("chat", "completions", "responses", "messages")  # the route's pydantic model, lax
GATE = ("ollama", "generate", "vertex")  # JSON numbers only
# spelling -> what the router does on the lax routes and on the gated ones: "forwarded" (as it
# is), "injected" (the contracted value added last), "violation" (400 before admission),
# "bad_request" (400: not one JSON object the engine would read either).
SPELLINGS: list[tuple[bytes, str, str]] = [
    (b'"temperature":1', "forwarded", "forwarded"),
    (b'"temperature":1.0', "forwarded", "forwarded"),
    (b'"temperature":"1"', "forwarded", "violation"),  # a string: pydantic reads it, SamplingParams never
    (b'"temperature":" 1 "', "forwarded", "violation"),
    (b'"temperature":"1_0"', "violation", "violation"),  # pydantic: 10
    (b'"temperature":true', "forwarded", "violation"),  # pydantic: 1.0; the gate refuses bools
    (b'"temperature":null', "injected", "injected"),
    (b'"temperature":NaN', "bad_request", "bad_request"),  # orjson refuses the literal
    (b'"temperature":1e400', "violation", "violation"),  # beyond float range: unusable
    (b'"temperature":[1]', "violation", "violation"),
    (b'"temperature":{"a":1}', "violation", "violation"),
    (b'"\\u0074emperature":1', "forwarded", "forwarded"),  # keys compare after unescaping
    (b'"temperature":0.2,"temperature":1', "forwarded", "forwarded"),  # the last wins
    (b'"temperature":1,"temperature":0.2', "violation", "violation"),
    (b'"temperature":1,"temperature":null', "injected", "injected"),
]


def _outcome(dialect: Dialect, body: bytes) -> tuple[str, bytes]:
    compiled = compile_contract(
        SamplingContract({"temperature": Exact(1)}, ConflictPolicy.REJECT), scope="*", revision=1
    )
    try:
        forwarded = bytes(enforce(compiled, probe_body(body, dialect), body, "/route"))
    except BadRequest:
        return "bad_request", b""
    except SamplingContractViolation:
        return "violation", b""
    return ("forwarded" if forwarded == body else "injected"), forwarded


@pytest.mark.parametrize("name", sorted(WRAP))
@pytest.mark.parametrize(("spelling", "lax", "gate"), SPELLINGS, ids=[s.decode() for s, _, _ in SPELLINGS])
def test_pinned_spellings(name: str, spelling: bytes, lax: str, gate: str) -> None:
    """Each spelling of a temperature, on each route, is read as that route's engine reads it."""
    dialect = DIALECTS[name]
    body = WRAP[name](spelling)
    outcome, forwarded = _outcome(dialect, body)
    assert outcome == (lax if name in LAX else gate)
    if forwarded:
        reading = engine.DIALECTS[name](forwarded)
        assert not isinstance(reading, engine.Refused), reading
        assert [float(s.value("temperature")) for s in reading] == [1.0]


@pytest.mark.parametrize("name", sorted(WRAP))
@pytest.mark.parametrize(
    "encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"], ids=lambda e: str(e)
)
def test_bodies_the_engine_cannot_decode_are_bad_requests(name: str, encoding: str) -> None:
    """UTF-16/32 (with or without BOM) and a UTF-8 BOM: orjson refuses them, and so does the router."""
    body = WRAP[name](b'"temperature":0.2').decode().encode(encoding)
    assert _outcome(DIALECTS[name], body)[0] == "bad_request"
    assert isinstance(engine.DIALECTS[name](body), engine.Refused)
