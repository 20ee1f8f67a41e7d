"""Splice properties (SPEC §3.3): injected pairs are valid JSON that wins under last-key-wins; the
rest of the body is forwarded byte for byte; a body with nothing to inject is the same object."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.contracts import FIELD_BY_NAME, ConflictPolicy, Exact, SamplingContract
from dataplane.errors import BadRequest, SamplingContractViolation
from dataplane.router.body import SplicedBody
from dataplane.router.contract.dialects import CHAT, GENERATE
from dataplane.router.contract.enforce import SEGMENTED_FROM, compile_contract, enforce, splice
from dataplane.router.contract.probe import ABSENT, probe_body
from tests.fakes.sampling import (
    contract_hints,
    random_chat_body,
    random_contract,
    random_generate_body,
    seeds,
)


def _injected(contract: SamplingContract, states: list[int]) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for name, spec in contract.params.items():
        if states[FIELD_BY_NAME[name].index] != ABSENT:
            continue
        value = spec.value if isinstance(spec, Exact) else spec.default
        if value is not None:
            out[name] = value
    return out


def _check(seed: int, *, generate: bool) -> None:
    rng = random.Random(seed)
    contract = random_contract(rng, rng.choice(list(ConflictPolicy)))
    body = (random_generate_body if generate else random_chat_body)(rng, contract_hints(contract))
    try:
        probe = probe_body(body, GENERATE if generate else CHAT)
        out = enforce(compile_contract(contract, scope="*", revision=1), probe, body)
    except (BadRequest, SamplingContractViolation):
        return
    expected = _injected(contract, probe.states)
    if not expected:
        assert out is body
        return
    assert isinstance(out, bytes)  # bodies this small are spliced in one piece
    try:
        original = json.loads(body)
    except ValueError:
        return  # msgspec accepted what json.loads refuses (e.g. bad UTF-8 in a string): the engine refuses both
    doc = json.loads(out)  # valid JSON
    target = doc["sampling_params"] if generate else doc
    for name, value in expected.items():
        assert target[name] == value and type(target[name]) is type(value)
    # Nothing else changed.
    if generate:
        before = original.get("sampling_params") or {}
        assert {k: v for k, v in target.items() if k not in expected} == {
            k: v for k, v in before.items() if k not in expected
        }
        assert {k: v for k, v in doc.items() if k != "sampling_params"} == {
            k: v for k, v in original.items() if k != "sampling_params"
        }
    else:
        assert {k: v for k, v in doc.items() if k not in expected} == {
            k: v for k, v in original.items() if k not in expected
        }
        # Byte for byte: the body is the output minus one contiguous insertion.
        extra = len(out) - len(body)
        at = probe.insert_at
        assert out[:at] == body[:at] and out[at + extra :] == body[at:]


@settings(max_examples=1500, deadline=None)
@given(seeds())
def test_chat_splice(seed: int) -> None:
    """Chat bodies: the spliced body parses, carries the injected values, and changes nothing else."""
    _check(seed, generate=False)


@settings(max_examples=1500, deadline=None)
@given(seeds())
def test_generate_splice(seed: int) -> None:
    """/generate bodies: the same under sampling_params (created, or re-stated last)."""
    _check(seed, generate=True)


@settings(max_examples=1000, deadline=None)
@given(seeds(), st.booleans())
def test_segments_carry_the_spliced_bytes(seed: int, generate: bool) -> None:
    """Spliced as segments, a body carries exactly the bytes of the one-piece splice, and its
    client parts are views of the client's body, not copies."""
    rng = random.Random(seed)
    body = (random_generate_body if generate else random_chat_body)(rng, [])
    try:
        probe = probe_body(body, GENERATE if generate else CHAT)
    except BadRequest:
        return
    pairs = [b'"top_p":0.5', b'"n":1']
    joined = splice(probe, body, pairs, segmented_from=1 << 62)
    segmented = splice(probe, body, pairs, segmented_from=0)
    assert isinstance(joined, bytes) and isinstance(segmented, SplicedBody)
    assert bytes(segmented) == joined and len(segmented) == len(joined)
    first, last = segmented.segments[0], segmented.segments[-1]
    assert isinstance(first, memoryview) and first.obj is body
    assert isinstance(last, memoryview) and last.obj is body


def test_a_large_body_is_spliced_as_segments() -> None:
    """A multi-MiB chat body comes back as segments whose bytes the engine reads with the
    injected values last, everything else unchanged."""
    doc = {
        "model": "m",
        "messages": [{"role": "user", "content": 'caf\u00e9 "q"\n' * 40_000}] * 8,
        "temperature": 0.7,
    }
    body = json.dumps(doc).encode()
    assert len(body) > 2 * SEGMENTED_FROM
    contract = SamplingContract({"temperature": Exact(0.7), "top_p": Exact(0.95), "n": Exact(2)})
    out = enforce(compile_contract(contract, scope="*", revision=1), probe_body(body), body)
    assert isinstance(out, SplicedBody)
    assert json.loads(bytes(out)) == {**doc, "top_p": 0.95, "n": 2}
    small = json.dumps({**doc, "messages": []}).encode()
    assert isinstance(
        enforce(compile_contract(contract, scope="*", revision=1), probe_body(small), small), bytes
    )
