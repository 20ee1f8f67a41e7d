"""``GET /metrics`` latency of a ``--processes N`` router (every child answers for all) vs one process.

With N > 1 the scraped child gathers its N-1 siblings' metric families over unix sockets and
merges them (``dataplane/router/process/metrics.py``); with N = 1 it renders its own, as before.
For each N: an engine-sim, the router, ``--requests`` chat completions over fresh connections
(spread over the children), then ``--scrapes`` scrapes, each on a fresh connection (so they land
on random children), timed from connect to the last byte. Medians and p90, ratios against N = 1
measured in the same run.

    .venv/bin/python bench/processes_metrics.py [--requests 200] [--scrapes 40]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.engine_sim import EngineSim  # noqa: E402
from tests.fakes.router import RouterProcess  # noqa: E402

CHAT = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


def exchange(port: int, method: str, path: str, body: str | None = None) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body, {"content-type": "application/json"} if body else {})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, (resp.status, data[:200])
        return data
    finally:
        conn.close()


def measure(processes: int, sim: EngineSim, requests: int, scrapes: int) -> tuple[float, float, int]:
    """(median ms, p90 ms, body bytes) of ``scrapes`` scrapes of a ``--processes`` router."""
    with RouterProcess("--processes", str(processes), "--worker", sim.url, startup_timeout_s=60) as router:
        deadline = time.monotonic() + 60
        while sum("router listening" in x for x in router.output) < processes:
            assert time.monotonic() < deadline, "children did not start"
            time.sleep(0.05)
        for _ in range(requests):
            exchange(router.port, "POST", "/v1/chat/completions", CHAT)
        exchange(router.port, "GET", "/metrics")  # warm up
        took, size = [], 0
        for _ in range(scrapes):
            started = time.perf_counter()
            size = len(exchange(router.port, "GET", "/metrics"))
            took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.9) - 1], size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=40)
    args = parser.parse_args()
    rows = []
    with EngineSim() as sim:
        for processes in (1, 2, 4):
            rows.append((processes, *measure(processes, sim, args.requests, args.scrapes)))
    base = rows[0][1]
    print("| --processes | scrape median ms | p90 ms | vs 1 process | body bytes |")
    print("|---:|---:|---:|---:|---:|")
    for processes, med, p90, size in rows:
        print(f"| {processes} | {med:.1f} | {p90:.1f} | {med / base:.2f}x | {size} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
