"""Router resilience with real processes: mixed protocols, workers dying, ejection and recovery (SPEC §5)."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.fakes.chat_stream import open_stream, post_chat, read_events
from tests.fakes.engine_sim import EngineSim
from tests.fakes.h2c import h2c_request
from tests.fakes.ports import free_port
from tests.fakes.process_tree import wait_for
from tests.fakes.router import RouterProcess


def _healthy(router: RouterProcess, url: str) -> float | None:
    return router.metrics().get(f'fleetplane_worker_healthy{{worker="{url}"}}')


def _upstream_ok(router: RouterProcess, protocol: str) -> float:
    return sum(
        v
        for k, v in router.metrics().items()
        if k.startswith("fleetplane_upstream_requests_total")
        and f'protocol="{protocol}"' in k
        and 'outcome="ok"' in k
    )


def test_mixed_http1_and_h2c_pool() -> None:
    """One HTTP/1.1 and two h2c workers (one discovered, one forced) all serve, streaming or not."""
    with (
        EngineSim() as h1,
        EngineSim("--http2") as h2_auto,
        EngineSim("--http2") as h2_forced,
        RouterProcess(
            "--policy",
            "round_robin",
            "--worker",
            h1.url,
            "--worker",
            h2_auto.url,
            "--worker",
            f"h2c://{h2_forced.host}:{h2_forced.port}",
        ) as router,
    ):
        for i in range(18):
            status, _, body = post_chat(router.port, 4, stream=i % 2 == 1)
            assert status == 200, body
            if i % 2:
                assert body.rstrip().endswith(b"data: [DONE]")
            else:
                assert json.loads(body)["object"] == "chat.completion"
        assert _upstream_ok(router, "h2c") == 12
        assert _upstream_ok(router, "http1") == 6


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_engine_killed_mid_stream_ends_with_sse_error(http2: bool) -> None:
    """A worker dying mid-stream ends the client's SSE stream with an upstream_body_incomplete event."""
    flags = ["--decode-tokens-per-s", "50", *(["--http2"] if http2 else [])]
    with EngineSim(*flags) as sim, RouterProcess("--worker", sim.url) as router:
        conn, resp = open_stream(router.port, max_tokens=500)
        try:
            assert resp.status == 200
            first = resp.read1(65536)
            assert first.startswith(b"data: ")
            sim._proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            events = read_events(resp)
        finally:
            conn.close()
        assert events, "the stream ended without any event"
        last = events[-1]
        assert last.startswith(b"event: error\ndata: ")
        assert json.loads(last.split(b"data: ", 1)[1])["error"]["code"] == "upstream_body_incomplete"


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_engine_killed_before_a_plain_answer_is_502(http2: bool) -> None:
    """A worker dying before a non-streaming answer gives 502 upstream_body_incomplete (never retried)."""
    flags = ["--decode-tokens-per-s", "20", *(["--http2"] if http2 else [])]
    with EngineSim(*flags) as sim, RouterProcess("--worker", sim.url) as router:
        import threading

        killer = threading.Timer(0.5, lambda: sim._proc.send_signal(signal.SIGKILL))  # type: ignore[union-attr]
        killer.start()
        status, headers, body = post_chat(router.port, max_tokens=200)
        killer.join()
        assert status == 502
        assert headers["x-router-error-code"] == "upstream_body_incomplete"
        assert json.loads(body)["error"]["code"] == "upstream_body_incomplete"
        assert sim.url.split("//")[1].encode() not in body  # no worker address revealed


def test_dead_worker_is_ejected_and_probed_back() -> None:
    """With one worker dead every request is still answered 200; it is ejected, then restored on return."""
    with EngineSim() as good, EngineSim("--http2") as doomed:
        port = doomed.port
        with RouterProcess("--policy", "round_robin", "--worker", good.url, "--worker", doomed.url) as router:
            assert post_chat(router.port)[0] == 200
            doomed.stop()
            statuses = [post_chat(router.port)[0] for _ in range(20)]
            assert statuses == [200] * 20
            assert _healthy(router, doomed.url) == 0
            assert _healthy(router, good.url) == 1
            with EngineSim("--http2", "--listen", f"127.0.0.1:{port}"):
                assert wait_for(lambda: _healthy(router, doomed.url) == 1, timeout_s=20, interval_s=0.2)
                before = _upstream_ok(router, "h2c")
                statuses = [post_chat(router.port)[0] for _ in range(10)]
                assert statuses == [200] * 10
                assert _upstream_ok(router, "h2c") > before


def _engine_reqs(sim: EngineSim, http2: bool) -> int:
    """Requests running or waiting in the engine (its ``GET /get_load``), over its own protocol."""
    if not http2:
        return sum(rank["num_reqs"] for rank in sim.get_json("/get_load"))

    # A stock h2 client (prior knowledge), not the router's own pool: the engine's view, unfiltered.
    return sum(
        rank["num_reqs"] for rank in h2c_request(sim.host, sim.port, "GET", "/get_load", timeout_s=5).json()
    )


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_client_disconnect_cancels_the_upstream_request(http2: bool) -> None:
    """A client leaving mid-stream stops the engine's work (h2: RST_STREAM; h1: connection closed)."""
    flags = ["--decode-tokens-per-s", "20", *(["--http2"] if http2 else [])]
    with EngineSim(*flags) as sim, RouterProcess("--worker", sim.url) as router:
        conn, resp = open_stream(router.port, max_tokens=400)  # 20 s of decoding if never cancelled
        assert resp.status == 200
        assert resp.read1(65536).startswith(b"data: ")
        assert _engine_reqs(sim, http2) == 1
        conn.sock.close()  # type: ignore[union-attr]
        conn.close()
        assert wait_for(lambda: _engine_reqs(sim, http2) == 0, timeout_s=5, interval_s=0.1)
        assert post_chat(router.port)[0] == 200  # the router and its pool are still fine


def test_slow_reading_client_does_not_stall_the_shared_h2c_connection() -> None:
    """A client that stops reading a multi-MB stream holds only its own stream; others stay fast."""
    with EngineSim("--http2") as sim, RouterProcess("--worker", f"h2c://{sim.host}:{sim.port}") as router:
        conn, resp = open_stream(router.port, max_tokens=20000, timeout_s=60)  # several MB of SSE
        try:
            assert resp.status == 200
            assert resp.read1(1024).startswith(b"data: ")
            time.sleep(0.5)  # buffers fill: client socket, router, the h2c stream window
            started = time.monotonic()
            statuses = [post_chat(router.port, 8)[0] for _ in range(10)]
            assert statuses == [200] * 10
            assert time.monotonic() - started < 5.0
            events = read_events(resp)
        finally:
            conn.close()
        assert events[-1] == b"data: [DONE]"
        assert len(events) >= 19_990  # the rest after the first read: nothing lost


def test_worker_dead_at_startup_joins_when_it_answers() -> None:
    """A --worker down at startup does not stop the router; it joins (protocol discovered) once up."""
    port = free_port()
    dead_url = f"http://127.0.0.1:{port}"
    with EngineSim() as good, RouterProcess("--worker", good.url, "--worker", dead_url) as router:
        assert [post_chat(router.port)[0] for _ in range(10)] == [200] * 10
        assert _healthy(router, dead_url) == 0
        with EngineSim("--http2", "--listen", f"127.0.0.1:{port}"):
            assert wait_for(lambda: _healthy(router, dead_url) == 1, timeout_s=30, interval_s=0.2)
            assert [post_chat(router.port)[0] for _ in range(10)] == [200] * 10
            assert _upstream_ok(router, "h2c") > 0, {
                k: v for k, v in router.metrics().items() if "upstream" in k or "healthy" in k
            }
