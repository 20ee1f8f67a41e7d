"""A hung worker (SIGSTOP) behind a real router (SPEC §5: a worker that fails repeatedly is ejected
and probed back; 504 upstream_timeout): before, 4 of 80 requests hung
for more than 30 s (the 30-minute request timeout) and the worker was never ejected under
least_load. Now its failing /health checks eject it within seconds, the requests it holds end
with 504 upstream_timeout, and new requests go to the others."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.fakes.chat_client import MODEL, post
from tests.fakes.engine_sim import EngineSim, wait_until
from tests.fakes.router import RouterProcess

SLOW = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}  # ~2 s
FAST = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture
def sims() -> Iterator[list[EngineSim]]:
    with (
        EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as a,
        EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as b,
        EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as c,
    ):
        yield [a, b, c]


class Stopped:
    """SIGSTOP a process for the block; SIGCONT on the way out (the fixture then stops it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> float:
        os.kill(self.pid, signal.SIGSTOP)
        return time.monotonic()

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def _healthy(router: RouterProcess, url: str) -> float | None:
    return router.metrics().get(f'fleetplane_worker_healthy{{worker="{url}"}}')


def _timed_post(url: str, body: dict[str, object]) -> tuple[int, str, float]:
    """(status, x-router-error-code, when the answer arrived: monotonic)."""
    status, headers, _ = post(url, "/v1/chat/completions", json.dumps(body).encode(), timeout_s=60)
    return status, headers.get("x-router-error-code", ""), time.monotonic()


def _load(router: RouterProcess, until: threading.Event, out: list[tuple[float, int, float]]) -> None:
    """Short requests one after another: (sent, status, latency) each."""
    while not until.is_set():
        sent = time.monotonic()
        status, _, done = _timed_post(router.url, FAST)
        out.append((sent, status, done - sent))
        time.sleep(0.05)


def test_a_sigstopped_worker_is_ejected_and_its_requests_answered_504(sims: list[EngineSim]) -> None:
    """Default checks (every 2 s, 3 failures eject): 9 slow requests spread over 3 workers, then
    one worker is SIGSTOPped. It is ejected within 15 s; its requests end with 504
    upstream_timeout when it is (well before --upstream-ttfb-timeout-s 60); the others' requests
    succeed. Short requests sent meanwhile: the few the balancer gave the hung worker before its
    ejection end with 504 at the ejection; every one sent after it is answered 200 within 5 s."""
    hung = sims[0]
    workers = [arg for sim in sims for arg in ("--worker", sim.url)]
    with RouterProcess(*workers, "--upstream-ttfb-timeout-s", "60") as router, ThreadPoolExecutor(12) as pool:
        assert wait_until(lambda: all(_healthy(router, s.url) == 1 for s in sims), 10)
        slow: list[Future[tuple[int, str, float]]] = [
            pool.submit(_timed_post, router.url, SLOW) for _ in range(9)
        ]
        time.sleep(0.5)  # all nine in flight: least_load put three on each worker
        stop_load = threading.Event()
        short: list[tuple[float, int, float]] = []
        loader = pool.submit(_load, router, stop_load, short)
        with Stopped(hung.pid) as stopped_at:
            assert wait_until(lambda: _healthy(router, hung.url) == 0, 15, 0.1)
            ejected_after = time.monotonic() - stopped_at
            answers = [f.result(timeout=30) for f in slow]
            time.sleep(1.0)
            stop_load.set()
            loader.result(timeout=30)
    timed_out = [(code, at - stopped_at) for status, code, at in answers if status == 504]
    assert sorted(status for status, _, _ in answers) == [200] * 6 + [504] * 3, answers
    assert all(code == "upstream_timeout" and after < 20 for code, after in timed_out), timed_out
    assert ejected_after < 15
    ejected_at = stopped_at + ejected_after
    before = [(status, latency) for sent, status, latency in short if sent < ejected_at]
    after = [(status, latency) for sent, status, latency in short if sent >= ejected_at + 0.2]
    assert all(status in (200, 504) and latency < 15 for status, latency in before), before
    assert after and all(status == 200 and latency < 5.0 for status, latency in after), after


def test_requests_on_a_hung_worker_end_at_the_first_byte_timeout(sims: list[EngineSim]) -> None:
    """Active checks off, --upstream-ttfb-timeout-s 3: the requests a SIGSTOPped worker holds end
    with 504 upstream_timeout about 3 s after they were sent, and those timeouts eject it."""
    hung = sims[0]
    workers = [arg for sim in sims for arg in ("--worker", sim.url)]
    flags = ("--upstream-ttfb-timeout-s", "3", "--health-check-interval-s", "0")
    with RouterProcess(*workers, *flags) as router, ThreadPoolExecutor(9) as pool, Stopped(hung.pid):
        sent = time.monotonic()
        answers = [
            f.result(timeout=30) for f in [pool.submit(_timed_post, router.url, SLOW) for _ in range(9)]
        ]
        assert _healthy(router, hung.url) == 0
    late = [(code, at - sent) for status, code, at in answers if status == 504]
    assert len(late) == 3, answers
    assert all(code == "upstream_timeout" and 2.5 < after < 8 for code, after in late), late
    assert sorted(status for status, _, _ in answers) == [200] * 6 + [504] * 3
