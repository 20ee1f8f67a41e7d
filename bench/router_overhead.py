"""What the fleetplane router adds over talking to engine-sim directly.

    python bench/router_overhead.py [--duration-s 2] [--repeats 3] [--connections 16]
        [--modes both|non-streaming|streaming]

One run, same machine, same engine-sim: each load goes to (a) engine-sim directly and (b) the
router in front of it (one HTTP/1.1 worker, a contract that injects two fields on every request:
the realistic judged path, every feature on). Loads: 1 KiB chat body, non-streaming
(max_tokens 16) and streaming (16 SSE events), each at 1 connection (unloaded latency) and at
``--connections`` keep-alive connections (throughput, CPU per request).

Reported (medians of alternating direct/router runs): req/s, p50/p99 latency (wrk, to the last
byte) and what the router adds to them, and CPU microseconds per request of the router and of
engine-sim (the same-run baseline: a Python server on the same HTTP stack doing one hop's work):
each process's CPU time over the run (all threads, ``/proc/PID/task/*/schedstat``, ns
resolution) divided by the requests answered.

Load generator: wrk (C, so it takes as little of this 2-core machine as possible from the two
processes measured). Install it with ``apt-get install -y wrk``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import chat_body, cpu_seconds  # noqa: E402
from bench.procs import stop  # noqa: E402

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
        stop(self.popen)


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
    cpu_s: list[float]  # CPU seconds spent by each of ``pids`` during the run


def wrk(url: str, body: bytes, *, connections: int, duration_s: float, pids: tuple[int, ...]) -> Run:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(body.decode())}\n"
        )
    try:
        cpu0 = [cpu_seconds(pid) for pid in pids]
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
        cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu0, strict=True)]
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
        cpu_s=cpu,
    )


def _seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    assert m, text
    return float(m.group(1)) * _UNITS[m.group(2)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--modes",
        choices=("both", "non-streaming", "streaming"),
        default="both",
        help="measure only one answer mode (shorter A/B runs)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: install it with `apt-get install -y wrk`", file=sys.stderr)
        return 2
    sim = start(
        [
            PY,
            "-m",
            "dataplane.engine.sim",
            "--listen",
            "127.0.0.1:0",
            "--model",
            MODEL,
            "--decode-tokens-per-s",
            "0",
        ],
        "listening on",
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
        streams = {"both": (False, True), "non-streaming": (False,), "streaming": (True,)}[args.modes]
        for stream in streams:
            body = chat_body(MODEL, stream=stream, size=1024, max_tokens=16)
            for conns in (1, args.connections):
                # warm both paths (connections, pools, caches) before measuring
                for url in (sim.url, router.url):
                    wrk(url, body, connections=conns, duration_s=1, pids=())
                # Alternate short direct/router runs and keep medians: on a shared machine the
                # background load changes from second to second, and alternating spreads it
                # evenly over both sides.
                direct, via = [], []
                for _ in range(args.repeats):
                    direct.append(
                        wrk(sim.url, body, connections=conns, duration_s=args.duration_s, pids=(sim.pid,))
                    )
                    via.append(
                        wrk(
                            router.url,
                            body,
                            connections=conns,
                            duration_s=args.duration_s,
                            pids=(router.pid, sim.pid),
                        )
                    )
                rows.append((stream, conns, direct, via))
    finally:
        router.stop()
        sim.stop()

    print(
        f"router overhead — 1 KiB chat body, 16 tokens, median of {args.repeats} alternating "
        f"{args.duration_s:g} s runs per cell, wrk -t1; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'mode':<14}{'conns':>6}{'direct rps':>11}{'router rps':>11}{'p50 direct':>11}{'p50 +ms':>9}"
        f"{'p99 +ms':>9}{'router µs/req':>14}{'sim µs/req':>11}{'router/sim':>11}{'errors':>7}"
    )
    for stream, conns, direct, via in rows:
        router_cpu = median(v.cpu_s[0] / max(v.requests, 1) for v in via) * 1e6
        sim_cpu = median(d.cpu_s[0] / max(d.requests, 1) for d in direct) * 1e6
        print(
            f"{'streaming' if stream else 'non-streaming':<14}{conns:>6}"
            f"{median(d.rps for d in direct):>11.0f}{median(v.rps for v in via):>11.0f}"
            f"{median(d.p50_s for d in direct) * 1e3:>9.3f}ms"
            f"{(median(v.p50_s for v in via) - median(d.p50_s for d in direct)) * 1e3:>9.3f}"
            f"{(median(v.p99_s for v in via) - median(d.p99_s for d in direct)) * 1e3:>9.3f}"
            f"{router_cpu:>14.1f}{sim_cpu:>11.1f}{router_cpu / sim_cpu:>11.2f}"
            f"{sum(d.errors for d in direct) + sum(v.errors for v in via):>7}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
