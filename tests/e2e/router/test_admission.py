"""Admission under concurrent load through a real router: exact 429/503 counts, no leaked slot."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fakes.chat_client import MODEL, chat, post
from tests.fakes.engine_sim import EngineSim, wait_until
from tests.fakes.router import RouterProcess, series

# 10 tokens at 20 tokens/s: every admitted request holds its slot for about half a second.
SLOW = chat(max_tokens=10)


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[EngineSim]:
    with EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as s:
        yield s


def _burst(url: str, n: int) -> Counter[tuple[int, str]]:
    """n concurrent requests; counts of (status, x-router-error-code or '')."""

    def one(_: int) -> tuple[int, str]:
        status, headers, _ = post(url, "/v1/chat/completions", SLOW)
        return status, headers.get("x-router-error-code", "")

    with ThreadPoolExecutor(n) as pool:
        return Counter(pool.map(one, range(n)))


def test_full_queue_is_429_and_queued_requests_are_served(slow_sim: EngineSim) -> None:
    """2 slots + 2 queue places: of 6 simultaneous requests 4 are served and 2 get 429."""
    flags = ("--max-concurrency", "2", "--queue-size", "2", "--queue-timeout-s", "30")
    with RouterProcess("--worker", slow_sim.url, *flags) as router:
        counts = _burst(router.url, 6)
        assert counts == {(200, ""): 4, (429, "service_overloaded"): 2}


def test_queue_timeout_is_503(slow_sim: EngineSim) -> None:
    """With a queue timeout shorter than a request, queued requests get 503 queue_timeout."""
    flags = ("--max-concurrency", "2", "--queue-size", "2", "--queue-timeout-s", "0.2")
    with RouterProcess("--worker", slow_sim.url, *flags) as router:
        counts = _burst(router.url, 6)
        assert counts == {(200, ""): 2, (503, "queue_timeout"): 2, (429, "service_overloaded"): 2}


def _open_and_abandon(router: RouterProcess, body: dict[str, object]) -> socket.socket:
    sock = socket.create_connection((router.host, router.port))
    payload = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-length: %d\r\n\r\n%s"
        % (len(payload), payload)
    )
    return sock


def test_disconnected_clients_leak_no_slot(slow_sim: EngineSim) -> None:
    """Clients that vanish while streaming or queued give back their slots and queue places."""
    flags = ("--max-concurrency", "2", "--queue-size", "1", "--queue-timeout-s", "30")
    with RouterProcess("--worker", slow_sim.url, *flags) as router:
        long_stream = chat(max_tokens=400, stream=True)
        streaming = [_open_and_abandon(router, long_stream) for _ in range(2)]
        for sock in streaming:
            sock.settimeout(5)
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
        queued = _open_and_abandon(router, chat(max_tokens=1))
        depth = series("fleetplane_admission_queue_depth")
        assert wait_until(lambda: router.metrics()[depth] == 1, 5)
        for sock in [*streaming, queued]:
            sock.close()
        inflight = series("fleetplane_worker_inflight", worker=slow_sim.url)
        assert wait_until(lambda: router.metrics()[inflight] == 0 and router.metrics()[depth] == 0, 5)
        # All capacity is back: 2 slots + 1 queue place serve 3 simultaneous requests.
        time.sleep(0.1)
        counts = _burst(router.url, 3)
        assert counts == {(200, ""): 3}
        # A client going away is ordinary: nothing is logged as an error.
        assert [line for line in router.output if '"level": "error"' in line] == []


def test_refusals_happen_before_admission(slow_sim: EngineSim) -> None:
    """With every slot and queue place taken, a contract violation still gets its 400, not a 429."""
    flags = (
        "--max-concurrency",
        "1",
        "--queue-size",
        "0",
        "--override-sampling-params",
        '{"temperature": 0.5}',
    )
    with RouterProcess("--worker", slow_sim.url, *flags) as router:
        busy = _open_and_abandon(router, chat(max_tokens=200, stream=True))
        busy.settimeout(5)
        assert busy.recv(100).startswith(b"HTTP/1.1 200")
        assert (
            post(router.url, "/v1/chat/completions", chat())[1].get("x-router-error-code")
            == "service_overloaded"
        )
        status, headers, _ = post(router.url, "/v1/chat/completions", chat(temperature=1.5))
        assert (status, headers["x-router-error-code"]) == (400, "sampling_contract_violation")
        status, headers, _ = post(router.url, "/v1/chat/completions", chat("unknown-model"))
        assert (status, headers["x-router-error-code"]) == (404, "model_not_found")
        busy.close()
