"""SSE relaying (SPEC §5): chunks reach the client as the engine produces them, for every pairing
of client protocol (HTTP/1.1, h2c) and worker protocol (HTTP/1.1, h2c)."""

from __future__ import annotations

import time

import httpx2
import pytest

from tests.fakes.engine_sim import EngineSim
from tests.fakes.raw_http import MODEL
from tests.fakes.router import RouterProcess


@pytest.mark.parametrize("worker_h2c", [False, True], ids=["h1-worker", "h2c-worker"])
def test_sse_events_arrive_as_they_are_produced(worker_h2c: bool) -> None:
    """At 10 tokens/s, 6 tokens: the first event comes in well under the stream's length, the
    events are spread over it, and the answer carries x-contract-revision. Timed on connections
    already open (client to router, router to worker: one 1-token answer first), so the clock
    measures the relaying of events, not connection set-up on a busy machine."""
    flags = ["--model", MODEL, "--decode-tokens-per-s", "10"] + (["--http2"] if worker_h2c else [])
    with EngineSim(*flags) as sim, RouterProcess("--worker", sim.url) as router:
        for client_h2c in (False, True):
            with httpx2.Client(http1=not client_h2c, http2=client_h2c, base_url=router.url, timeout=20) as c:
                warm = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
                assert c.post("/v1/chat/completions", json=warm).status_code == 200
                started = time.monotonic()
                arrivals: list[float] = []
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "x"}],
                    "max_tokens": 6,
                    "stream": True,
                }
                with c.stream("POST", "/v1/chat/completions", json=body) as resp:
                    assert resp.http_version == ("HTTP/2" if client_h2c else "HTTP/1.1")
                    assert resp.headers["content-type"].startswith("text/event-stream")
                    assert resp.headers["x-contract-revision"] == "0"
                    arrivals = [
                        time.monotonic() - started for line in resp.iter_lines() if line.startswith("data:")
                    ]
                assert len(arrivals) >= 6
                assert arrivals[0] < 0.3
                assert arrivals[-1] - arrivals[0] > 0.3  # spread out, not buffered to the end
