"""Worker URLs, the worker index by model, and the load hook (SPEC §1 --worker, §5, §7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.router.balancer import PROMPT_MASK, held_work, predicted_wait, request_work, wait_terms
from dataplane.router.control.convert import EngineLoad
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


def test_engine_view_adds_the_signed_change_since_that_view() -> None:
    """With a fresh engine view, load = engine load + the router's own change since that view,
    signed: its completions since then count as much as its sends (SPEC §7)."""
    w = _worker("http://a:1", "m")
    w.inflight = 2
    w.observe_engine_load(10)
    assert w.load() == 10
    w.inflight = 5
    assert w.load() == 13
    w.inflight = 0
    assert w.load() == 8
    w.inflight = 5
    w.observe_engine_load(None)  # stale or gone: back to own counts
    assert w.load() == 5


@settings(max_examples=200)
@given(
    running=st.integers(0, 40),
    waiting=st.integers(0, 40),
    uncached=st.integers(0, 50_000),
    total=st.integers(0, 300_000),
    limit=st.integers(1, 16),
    rate=st.none() | st.floats(100, 1e6),
    at_view=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 20_000)), max_size=6),
    since=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 20_000)), max_size=6),
    done=st.integers(0, 6),
)
def test_worker_wait_is_the_balancers_predicted_wait(
    running: int,
    waiting: int,
    uncached: int,
    total: int,
    limit: int,
    rate: float | None,
    at_view: list[tuple[int, int]],
    since: list[tuple[int, int]],
    done: int,
) -> None:
    """Worker.wait (inlined for speed) is balancer.predicted_wait of its view and its own work:
    sends and completions since the view included."""
    w = _worker("http://a:1", "m")
    sent = [request_work(m, p) for m, p in at_view]
    for work in sent:
        w.inflight += 1
        w.work += work
    view = EngineLoad(running, waiting, True, 0, 262_144, uncached, total, limit, rate)
    w.observe_engine_load(running + waiting, view, 150.0)
    prompts_at_view = w.work & PROMPT_MASK
    for m, p in since:
        w.inflight += 1
        w.work += request_work(m, p)
    for work in sent[:done]:
        w.inflight -= 1
        w.work -= work
    own_work, prompts = held_work(w.work)
    expected = predicted_wait(
        wait_terms(view, own_inflight=len(sent), mean_work=150.0, slots=1),
        own_work,
        max(0, prompts - prompts_at_view),
    )
    assert w.wait() == pytest.approx(expected)
