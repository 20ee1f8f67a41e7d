"""Children of one ``--processes`` router answering ``/metrics`` for all, over unix sockets (``process.metrics``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataplane.router.admission import Admission
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.metrics import RouterMetrics
from dataplane.router.process.metrics import FETCH_TIMEOUT_S, ProcessMetrics, socket_path
from dataplane.router.state import RouterState

CHAT = "/v1/chat/completions"
WORKER = "http://127.0.0.1:9"


@pytest.fixture
def slot_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="fp-")  # short: unix socket paths are limited to 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def router_metrics(answers: int, inflight: int = 0) -> RouterMetrics:
    state = RouterState.standalone(None)
    state.apply_workers([WorkerSpec(WORKER, "http1", ("m",))])
    state.workers.workers[0].inflight = inflight
    metrics = RouterMetrics(state, Admission(4, 4, 1.0))
    for _ in range(answers):
        metrics.route(CHAT).observe(200, 0.01)
    return metrics


@pytest.fixture
async def started() -> AsyncIterator[list[ProcessMetrics]]:
    """Children started in a test (stopped at its end)."""
    children: list[ProcessMetrics] = []
    yield children
    for child in children:
        await child.stop()


async def start(
    children: list[ProcessMetrics], metrics: RouterMetrics, slot_dir: str, slot: int
) -> ProcessMetrics:
    child = ProcessMetrics(metrics, slot_dir, slot)
    await child.start()
    children.append(child)
    return child


def scraped(text: bytes) -> dict[str, float]:
    """``{sample{labels}: value}`` of an exposition, via prometheus-client's parser."""
    return {
        f"{s.name}{sorted(s.labels.items())}": s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def chat_answers(found: dict[str, float]) -> float:
    return found[f"fleetplane_requests_total{sorted({'route': CHAT, 'code': '200'}.items())}"]


def inflight(found: dict[str, float]) -> float:
    return found.get(f"fleetplane_worker_inflight{[('worker', WORKER)]}", 0.0)


async def test_any_child_answers_for_all(slot_dir: str, started: list[ProcessMetrics]) -> None:
    """Each of three children's /metrics shows the sum of the three children's counts and in-flight."""
    children = [
        await start(started, router_metrics(n, inflight=n), slot_dir, slot)
        for slot, n in enumerate((3, 5, 7))
    ]
    for child in children:
        found = scraped(await child.render())
        assert chat_answers(found) == 15
        assert inflight(found) == 15
        assert found["fleetplane_router_processes_live[]"] == 3


async def test_a_dead_child_keeps_its_counts_and_its_successor_adds_to_them(
    slot_dir: str, started: list[ProcessMetrics]
) -> None:
    """A stopped child's counts as last shown stay (no gauges); its slot's next child counts on from there."""
    first = await start(started, router_metrics(4), slot_dir, 0)
    dying = router_metrics(6, inflight=2)
    second = await start(started, dying, slot_dir, 1)
    assert chat_answers(scraped(await first.render())) == 10
    dying.route(CHAT).observe(200, 0.01)  # counted after the last scrape, never shown: lost
    await second.stop()
    started.remove(second)
    found = scraped(await first.render())
    assert chat_answers(found) == 10
    assert inflight(found) == 0
    assert found["fleetplane_router_processes_live[]"] == 1
    successor = await start(started, router_metrics(1), slot_dir, 1)
    for child in (first, successor):
        found = scraped(await child.render())
        assert chat_answers(found) == 11
        assert found["fleetplane_router_processes_live[]"] == 2


async def test_a_stuck_child_costs_at_most_the_fetch_timeout(
    slot_dir: str, started: list[ProcessMetrics]
) -> None:
    """A sibling that accepts but never answers is replaced by its snapshot after FETCH_TIMEOUT_S."""
    first = await start(started, router_metrics(2), slot_dir, 0)
    other = await start(started, router_metrics(3), slot_dir, 1)
    assert chat_answers(scraped(await first.render())) == 5
    await other.stop()
    started.remove(other)
    hung: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)

    server = await asyncio.start_unix_server(never_answer, socket_path(slot_dir, 1))
    try:
        began = time.monotonic()
        found = scraped(await first.render())
        assert time.monotonic() - began < FETCH_TIMEOUT_S + 0.5
        assert chat_answers(found) == 5
        assert found["fleetplane_router_processes_live[]"] == 1
    finally:
        for writer in hung:
            writer.close()
        server.close()
        await server.wait_closed()
        os.unlink(socket_path(slot_dir, 1))


async def test_a_large_sibling_exposition_arrives_whole(slot_dir: str, started: list[ProcessMetrics]) -> None:
    """A sibling with thousands of series (hundreds of KB) is merged in full, not as a first chunk."""
    big = router_metrics(1)
    for n in range(3000):
        big.upstream_outcome(f"http://10.0.{n // 250}.{n % 250}:8000", "http1", "ok")
    first = await start(started, router_metrics(1), slot_dir, 0)
    await start(started, big, slot_dir, 1)
    found = scraped(await first.render())
    assert found["fleetplane_router_processes_live[]"] == 2
    assert sum(v for k, v in found.items() if k.startswith("fleetplane_upstream_requests_total")) == 3000
