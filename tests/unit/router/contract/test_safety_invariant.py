"""Differential property test of SPEC §3.3's safety invariant: probe + enforce against the engine's
own reading (json.loads, last key wins, then pydantic lax validation with §2's types)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings

from controlplane.contracts import Band, ConflictPolicy, Exact, SamplingContract
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.contract.dialects import CHAT, GENERATE
from dataplane.router.contract.enforce import compile_contract, enforce
from dataplane.router.contract.probe import probe_body
from tests.fakes.sampling import (
    contract_hints,
    engine_view,
    random_chat_body,
    random_contract,
    random_generate_body,
    seeds,
    values_equal,
)

EXAMPLES = 3000


def _check_forwarded(contract: SamplingContract, body: bytes, *, generate: bool) -> str:
    """Assert the invariant for one body; say what happened (for the coverage assertions)."""
    compiled = compile_contract(contract, scope="*", revision=1)
    try:
        probe = probe_body(body, GENERATE if generate else CHAT)
        forwarded = enforce(compiled, probe, body)
    except BadRequest:
        return "bad_request"
    except SamplingContractViolation:
        return "violation"  # refused before admission: nothing reaches the engine
    seen = engine_view(forwarded, generate=generate)
    if seen is None:
        return "engine_refuses"  # json.loads or pydantic refuses it: nothing is sampled
    for name, spec in contract.params.items():
        got = seen.get(name)
        if isinstance(spec, Exact):
            assert got is not None and values_equal(float(got), float(spec.value)), (name, got, spec)
        elif got is None:
            assert spec.default is None, (name, spec)
        else:
            assert isinstance(spec, Band)
            assert spec.min <= got <= spec.max, (name, got, spec)
    return "forwarded" if forwarded is body else "injected"


def _run(seed: int, *, generate: bool) -> str:
    rng = random.Random(seed)
    contract = random_contract(rng, ConflictPolicy.REJECT)
    make = random_generate_body if generate else random_chat_body
    return _check_forwarded(contract, make(rng, contract_hints(contract)), generate=generate)


@settings(max_examples=EXAMPLES, deadline=None)
@given(seeds())
def test_chat_bodies_never_break_the_contract(seed: int) -> None:
    """Whatever a chat body holds, a forwarded one makes the engine read contracted values only."""
    _run(seed, generate=False)


@settings(max_examples=EXAMPLES, deadline=None)
@given(seeds())
def test_generate_bodies_never_break_the_contract(seed: int) -> None:
    """Same invariant for /generate, whose fields live under sampling_params."""
    _run(seed, generate=True)


def test_generated_bodies_reach_every_outcome() -> None:
    """The generators are not vacuous: thousands of bodies pass, get injected, and are refused."""
    for generate in (False, True):
        counts = Counter(_run(seed, generate=generate) for seed in range(2000))
        assert counts["forwarded"] + counts["injected"] >= 200, counts
        assert counts["injected"] >= 100 and counts["violation"] >= 100, counts
