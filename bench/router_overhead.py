"""What the fleetplane router adds over talking to engine-sim directly (issue 6 benchmark).

    python bench/router_overhead.py [--duration-s 4] [--connections 16]

One run, same machine, same engine-sim: each load goes to (a) engine-sim directly and (b) the
router in front of it (one HTTP/1.1 worker, a contract that injects two fields on every request:
the realistic judged path, every feature on). Loads: 1 KiB chat body, non-streaming
(max_tokens 16) and streaming (16 SSE events), each at 1 connection (unloaded latency) and at
``--connections`` keep-alive connections (throughput, CPU per request).

Reported: req/s, p50/p99 latency (wrk, to the last byte) and what the router adds to them, and
router CPU microseconds per request: the router process's CPU time over the run (all threads,
``/proc/PID/task/*/schedstat``, ns resolution) divided by the requests answered.

Load generator: wrk (C, so it takes as little of this 2-core machine as possible from the two
processes measured). Install it with ``apt-get install -y wrk``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import chat_body, cpu_seconds  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
MODEL = "sim-model"
CONTRACT = '{"temperature": 0.7, "top_p": 0.95}'
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


@dataclass
class Proc:
    popen: subprocess.Popen[str]
    url: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start(argv: list[str], pattern: str) -> Proc:
    popen = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True
    )
    assert popen.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = popen.stdout.readline()
        if not line:
            break
        m = re.search(pattern + r" (http://\S+)", line)
        if m:
            return Proc(popen, m.group(1))
    popen.kill()
    raise SystemExit(f"could not start {argv}")


@dataclass
class Run:
    rps: float
    p50_s: float
    p99_s: float
    requests: int
    errors: int
    router_cpu_s: float


def wrk(url: str, body: bytes, *, connections: int, duration_s: float, router_pid: int | None) -> Run:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(body.decode())}\n"
        )
    try:
        cpu0 = cpu_seconds(router_pid) if router_pid else 0.0
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{max(1, round(duration_s))}s",
                "--latency",
                "-s",
                script.name,
                url + "/v1/chat/completions",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        cpu = (cpu_seconds(router_pid) - cpu0) if router_pid else 0.0
    finally:
        os.unlink(script.name)
    pct = dict(re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)", out, re.M))
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors_m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Run(
        rps=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        p50_s=_seconds(pct["50"]),
        p99_s=_seconds(pct["99"]),
        requests=requests,
        errors=int(errors_m.group(1)) if errors_m else 0,
        router_cpu_s=cpu,
    )


def _seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    assert m, text
    return float(m.group(1)) * _UNITS[m.group(2)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: install it with `apt-get install -y wrk`", file=sys.stderr)
        return 2
    sim = start(
        [PY, "-m", "dataplane.engine.sim", "--listen", "127.0.0.1:0", "--model", MODEL], "listening on"
    )
    router = start(
        [
            PY,
            "-m",
            "dataplane",
            "--listen",
            "127.0.0.1:0",
            "--worker",
            sim.url,
            "--override-sampling-params",
            CONTRACT,
        ],
        "router listening on",
    )
    rows = []
    try:
        for stream in (False, True):
            body = chat_body(MODEL, stream=stream, size=1024, max_tokens=16)
            for conns in (1, args.connections):
                # warm both paths (connections, pools, caches) before measuring
                for url in (sim.url, router.url):
                    wrk(url, body, connections=conns, duration_s=1, router_pid=None)
                direct = wrk(sim.url, body, connections=conns, duration_s=args.duration_s, router_pid=None)
                via = wrk(
                    router.url, body, connections=conns, duration_s=args.duration_s, router_pid=router.pid
                )
                rows.append((stream, conns, direct, via))
    finally:
        router.stop()
        sim.stop()

    print(f"router overhead — 1 KiB chat body, 16 tokens, {args.duration_s:g} s per cell, wrk -t1")
    print(
        f"{'mode':<14}{'conns':>6}{'direct rps':>12}{'router rps':>12}{'ratio':>7}"
        f"{'p50 +ms':>9}{'p99 +ms':>9}{'router p50':>11}{'CPU µs/req':>12}{'errors':>8}"
    )
    for stream, conns, direct, via in rows:
        print(
            f"{'streaming' if stream else 'non-streaming':<14}{conns:>6}{direct.rps:>12.0f}{via.rps:>12.0f}"
            f"{via.rps / direct.rps:>7.2f}{(via.p50_s - direct.p50_s) * 1e3:>9.3f}"
            f"{(via.p99_s - direct.p99_s) * 1e3:>9.3f}{via.p50_s * 1e3:>9.3f}ms"
            f"{via.router_cpu_s / max(via.requests, 1) * 1e6:>12.1f}{direct.errors + via.errors:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
