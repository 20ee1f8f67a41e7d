"""The callback-driven path to an h2c worker (``H2Pool.start``, no task) keeps the SPEC §5 behaviour.

Each test first sends one request so the router holds an h2c connection that has heard from the
worker: the request under test is written at once on it and answered from its callbacks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL, chat, error_of, post, read_json_answer, send_raw_chat
from tests.fakes.engine_sim import EngineSim, wait_until
from tests.fakes.router import RouterProcess, series

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def slow_h2c_sim() -> Iterator[EngineSim]:
    """An h2c worker at 20 tokens/s: an answer of n tokens takes about n/20 s."""
    with EngineSim("--model", MODEL, "--decode-tokens-per-s", "20", "--http2") as s:
        yield s


def _warm(router: RouterProcess) -> None:
    assert post(router.url, CHAT, chat(max_tokens=1))[0] == 200


def test_answers_on_a_warm_h2c_connection(slow_h2c_sim: EngineSim) -> None:
    """Plain and streamed answers on a reused h2c connection arrive whole, with the contract header."""
    with RouterProcess("--worker", slow_h2c_sim.url) as router:
        _warm(router)
        status, headers, raw = post(router.url, CHAT, chat(max_tokens=2))
        assert status == 200
        assert headers["x-contract-revision"] == "0"
        assert json.loads(raw)["choices"][0]["message"]["content"]
        status, _, raw = post(router.url, CHAT, chat(max_tokens=3, stream=True))
        assert status == 200
        assert raw.decode().strip().endswith("data: [DONE]")
        ok = series(
            "fleetplane_upstream_requests_total", outcome="ok", protocol="h2c", worker=slow_h2c_sim.url
        )
        assert router.metrics()[ok] == 3


def test_timeout_on_a_warm_h2c_connection_is_504(slow_h2c_sim: EngineSim) -> None:
    """Past --request-timeout-s on a reused h2c connection: 504 upstream_timeout, counted as an h2c timeout."""
    with RouterProcess("--worker", slow_h2c_sim.url, "--request-timeout-s", "0.3") as router:
        _warm(router)
        status, headers, raw = post(router.url, CHAT, chat(max_tokens=40))
        assert error_of(status, headers, raw)[:2] == (504, "upstream_timeout")
        timeouts = series(
            "fleetplane_upstream_requests_total", outcome="timeout", protocol="h2c", worker=slow_h2c_sim.url
        )
        assert router.metrics()[timeouts] == 1
        _warm(router)  # the connection still serves (only the stream was reset)


def test_client_leaving_before_the_head_frees_the_slot(slow_h2c_sim: EngineSim) -> None:
    """A client gone while its request waits on a reused h2c connection is counted 499 and holds nothing."""
    flags = ("--max-concurrency", "1", "--queue-size", "0")
    with RouterProcess("--worker", slow_h2c_sim.url, *flags) as router:
        _warm(router)
        sock = send_raw_chat(router.host, router.port, chat(max_tokens=200))
        time.sleep(0.2)
        sock.close()
        inflight = series("fleetplane_worker_inflight", worker=slow_h2c_sim.url)
        gone = series("fleetplane_requests_total", code="499", route=CHAT)
        assert wait_until(lambda: router.metrics().get(gone) == 1 and router.metrics()[inflight] == 0, 5)
        assert post(router.url, CHAT, chat(max_tokens=1))[0] == 200  # the one slot is free again
        client_gone = series(
            "fleetplane_upstream_requests_total",
            outcome="client_gone",
            protocol="h2c",
            worker=slow_h2c_sim.url,
        )
        assert router.metrics()[client_gone] == 1
        assert [line for line in router.output if '"level": "error"' in line] == []


def test_h2c_worker_killed_before_answering_is_502() -> None:
    """An h2c worker dying before its answer on a reused connection gives 502 upstream_body_incomplete."""
    sim = EngineSim("--model", MODEL, "--decode-tokens-per-s", "20", "--http2").start()
    try:
        with RouterProcess("--worker", sim.url) as router:
            _warm(router)
            sock = send_raw_chat(router.host, router.port, chat(max_tokens=200))
            time.sleep(0.3)
            sim.stop()
            head, body = read_json_answer(sock)
            assert head.startswith(b"HTTP/1.1 502")
            assert json.loads(body)["error"]["code"] == "upstream_body_incomplete"
    finally:
        sim.stop()
