"""Worker URLs, the worker index by model, and the load hook (SPEC §1 --worker, §5, §7)."""

from __future__ import annotations

import pytest

from dataplane.router.fleet.workers import Worker, WorkerAddress, WorkerSet, WorkerSpec, WorkerUrlError
from tests.fakes.upstream import FakePool


def _worker(url: str, *models: str) -> Worker:
    spec = WorkerSpec(url, "http1", models)
    return Worker(spec, FakePool(spec))


def test_worker_urls() -> None:
    """http:// and h2c:// URLs parse; the h2c scheme forces h2c; anything else is refused."""
    assert WorkerAddress.parse("http://127.0.0.1:9001") == WorkerAddress(
        "http://127.0.0.1:9001", "127.0.0.1", 9001, False
    )
    assert WorkerAddress.parse("h2c://[::1]:9002/").forced_h2c
    assert WorkerAddress.parse("h2c://[::1]:9002").host == "::1"
    for bad in ("https://a:1", "a:1", "http://a:1/v1", "http://a:99999", "http://:1"):
        with pytest.raises(WorkerUrlError):
            WorkerAddress.parse(bad)


def test_index_by_model() -> None:
    """Workers are indexed by every model they serve; a one-model fleet has a sole model."""
    a, b, c = _worker("http://a:1", "m"), _worker("http://b:1", "m", "n"), _worker("http://c:1", "n")
    workers = WorkerSet([a, b, c])
    assert workers.by_model["m"] == (a, b) and workers.by_model["n"] == (b, c)
    assert workers.sole_model is None
    assert WorkerSet([a]).sole_model == "m"


def test_healthy_models_only() -> None:
    """GET /v1/models lists only models some healthy worker serves."""
    a, c = _worker("http://a:1", "m"), _worker("http://c:1", "n")
    c.healthy = False
    assert WorkerSet([a, c]).healthy_models() == ["m"]


def test_load_is_own_inflight_without_an_engine_view() -> None:
    """Standalone: the load is the router's own in-flight count."""
    w = _worker("http://a:1", "m")
    w.inflight = 3
    assert w.load() == 3


def test_engine_view_adds_only_what_was_sent_since() -> None:
    """With a fresh engine view, load = engine load + requests sent since that view (SPEC §7)."""
    w = _worker("http://a:1", "m")
    w.inflight = 2
    w.observe_engine_load(10)
    assert w.load() == 10
    w.inflight = 5
    assert w.load() == 13
    w.observe_engine_load(None)  # stale or gone: back to own counts
    assert w.load() == 5
