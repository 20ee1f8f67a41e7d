"""The callback-driven forwarding path keeps the SPEC §5 behaviour of the task path.

A request that finds a free slot and an idle connection to its worker is written at once and
answered from the connection's callbacks (no task). Each test first sends one request so the
router holds an idle connection to the worker: the request under test takes that path.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fakes.chat_client import MODEL, chat, error_of, post, read_json_answer, send_raw_chat
from tests.fakes.engine_sim import EngineSim, wait_until
from tests.fakes.router import RouterProcess, series

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[EngineSim]:
    """20 tokens/s: an answer of n tokens takes about n/20 s."""
    with EngineSim("--model", MODEL, "--decode-tokens-per-s", "20") as s:
        yield s


def _warm(router: RouterProcess) -> None:
    assert post(router.url, CHAT, chat(max_tokens=1))[0] == 200


def _send_raw(router: RouterProcess, body: dict[str, object]) -> socket.socket:
    return send_raw_chat(router.host, router.port, body)


def test_timeout_on_a_warm_connection_is_504_or_a_final_sse_error(slow_sim: EngineSim) -> None:
    """Past --request-timeout-s on a reused connection: 504 upstream_timeout; a stream ends with an error event."""
    with RouterProcess("--worker", slow_sim.url, "--request-timeout-s", "0.3") as router:
        _warm(router)
        status, headers, raw = post(router.url, CHAT, chat(max_tokens=40))
        assert error_of(status, headers, raw)[:2] == (504, "upstream_timeout")
        assert headers["x-contract-revision"] == "0"
        _warm(router)
        status, _, raw = post(router.url, CHAT, chat(max_tokens=40, stream=True))
        assert status == 200
        last = raw.decode().strip().split("\n\n")[-1]
        assert json.loads(last.split("data: ", 1)[1])["error"]["code"] == "upstream_timeout"
        timeouts = series(
            "fleetplane_upstream_requests_total", outcome="timeout", protocol="http1", worker=slow_sim.url
        )
        assert router.metrics()[timeouts] == 2


def test_client_leaving_before_the_head_frees_the_slot_and_the_connection(slow_sim: EngineSim) -> None:
    """A client gone while its request waits on a reused connection is counted 499 and holds nothing."""
    flags = ("--max-concurrency", "1", "--queue-size", "0")
    with RouterProcess("--worker", slow_sim.url, *flags) as router:
        _warm(router)
        sock = _send_raw(router, chat(max_tokens=200))
        time.sleep(0.2)
        sock.close()
        inflight = series("fleetplane_worker_inflight", worker=slow_sim.url)
        gone = series("fleetplane_requests_total", code="499", route=CHAT)
        assert wait_until(lambda: router.metrics().get(gone) == 1 and router.metrics()[inflight] == 0, 5)
        # The one slot is free again: the next request is served, not refused with 429.
        assert post(router.url, CHAT, chat(max_tokens=1))[0] == 200
        client_gone = series(
            "fleetplane_upstream_requests_total", outcome="client_gone", protocol="http1", worker=slow_sim.url
        )
        assert router.metrics()[client_gone] == 1
        assert [line for line in router.output if '"level": "error"' in line] == []


def test_worker_killed_before_answering_on_a_warm_connection_is_502() -> None:
    """A worker dying before its answer on a reused connection gives 502 upstream_body_incomplete."""
    sim = EngineSim("--model", MODEL, "--decode-tokens-per-s", "20").start()
    try:
        with RouterProcess("--worker", sim.url) as router:
            _warm(router)
            sock = _send_raw(router, chat(max_tokens=200))
            time.sleep(0.3)
            sim.stop()
            head, body = read_json_answer(sock)
            assert head.startswith(b"HTTP/1.1 502")
            assert b"x-router-error-code: upstream_body_incomplete" in head
            assert json.loads(body)["error"]["code"] == "upstream_body_incomplete"
    finally:
        sim.stop()


def test_stream_on_a_warm_connection_arrives_event_by_event(slow_sim: EngineSim) -> None:
    """An SSE answer on a reused connection is relayed as its events arrive, to the final [DONE]."""
    with RouterProcess("--worker", slow_sim.url) as router:
        _warm(router)
        sock = _send_raw(router, chat(max_tokens=6, stream=True))
        sock.settimeout(10)
        arrivals: list[float] = []
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            arrivals.append(time.monotonic())
            data += chunk
        sock.close()
        assert data.startswith(b"HTTP/1.1 200")
        assert b"x-contract-revision: 0" in data.split(b"\r\n\r\n", 1)[0]
        assert data.count(b"data: ") >= 7  # at least the 6 tokens and [DONE]
        assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert arrivals[-1] - arrivals[0] > 0.15  # not buffered into one write at the end
