"""Router processes for the router's acceptance tests: engine-sims, a router under a contract, a
recording worker, each started once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL as SIM_MODEL
from tests.fakes.engine_sim import EngineSim
from tests.fakes.raw_http import CONTRACT, MODEL, CaptureWorker
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[EngineSim, EngineSim]]:
    """Two HTTP/1.1 engine-sims serving ``sim-model``."""
    with EngineSim("--model", SIM_MODEL) as a, EngineSim("--model", SIM_MODEL) as b:
        yield a, b


@pytest.fixture(scope="module")
def sim() -> Iterator[EngineSim]:
    """One HTTP/1.1 engine-sim serving ``MODEL``."""
    with EngineSim("--model", MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def router(sim: EngineSim) -> Iterator[RouterProcess]:
    """A standalone router in front of ``sim`` with ``CONTRACT`` under reject."""
    with RouterProcess("--worker", sim.url, "--override-sampling-params", CONTRACT) as r:
        yield r


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureWorker]:
    """A worker that records the exact bytes the router forwards."""
    worker = CaptureWorker()
    try:
        yield worker
    finally:
        worker.close()
