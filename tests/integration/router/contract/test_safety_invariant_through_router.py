"""SPEC §3.3's safety invariant black-box: random adversarial bodies through a real router process;
whatever reaches the (recording) worker, the engine's reading (json.loads + pydantic) is contracted."""

from __future__ import annotations

import http.client
import os
import random
from collections import Counter
from collections.abc import Iterator

import pytest

from controlplane.contracts import Band, ConflictPolicy, Exact, SamplingContract
from controlplane.contracts.convert import contract_to_json
from tests.fakes.raw_http import CaptureWorker
from tests.fakes.router import RouterProcess
from tests.fakes.sampling import (
    contract_hints,
    engine_view,
    random_chat_body,
    random_contract,
    random_generate_body,
    values_equal,
)

# AUDIT_BODIES=3000 AUDIT_SEEDS=1,2,3,4 for a deeper run.
BODIES_PER_CONTRACT = int(os.environ.get("AUDIT_BODIES", "300"))


def check(contract: SamplingContract, forwarded: bytes, *, generate: bool) -> None:
    """The engine reads every exact field as contracted and every band field inside its band."""
    seen = engine_view(forwarded, generate=generate)
    if seen is None:
        return  # the engine refuses the body: nothing is sampled
    for name, spec in contract.params.items():
        got = seen.get(name)
        if isinstance(spec, Exact):
            assert got is not None and values_equal(float(got), float(spec.value)), (name, got, forwarded)
        elif got is None:
            assert spec.default is None, (name, forwarded)
        else:
            assert isinstance(spec, Band)
            assert spec.min <= got <= spec.max, (name, got, forwarded)


@pytest.fixture(scope="module")
def capture_worker() -> Iterator[CaptureWorker]:
    worker = CaptureWorker()
    try:
        yield worker
    finally:
        worker.close()


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("AUDIT_SEEDS", "11,22,33").split(",")])
def test_random_bodies_never_break_the_contract(capture_worker: CaptureWorker, seed: int) -> None:
    """Hundreds of adversarial chat and /generate bodies: every forwarded one keeps the contract."""
    rng = random.Random(seed)
    contract = random_contract(rng, ConflictPolicy.REJECT)
    outcomes: Counter[str] = Counter()
    with RouterProcess(
        "--worker", capture_worker.url, "--override-sampling-params", contract_to_json(contract)
    ) as r:
        conn = http.client.HTTPConnection(r.host, r.port, timeout=10)
        try:
            for i in range(BODIES_PER_CONTRACT):
                generate = i % 2 == 1
                make = random_generate_body if generate else random_chat_body
                body = make(rng, contract_hints(contract))
                capture_worker.requests.clear()
                conn.request("POST", "/generate" if generate else "/v1/chat/completions", body)
                resp = conn.getresponse()
                resp.read()
                if resp.status == 200:
                    [(_, _, forwarded)] = capture_worker.requests
                    check(contract, forwarded, generate=generate)
                    outcomes["forwarded"] += 1
                else:
                    # 400 (malformed, violation) or 404 (a random model nobody serves): refused.
                    assert resp.status in (400, 404), (resp.status, body)
                    assert not capture_worker.requests
                    outcomes[resp.getheader("x-router-error-code") or ""] += 1
        finally:
            conn.close()
    assert outcomes["forwarded"] >= 20 and outcomes["sampling_contract_violation"] >= 20, outcomes
