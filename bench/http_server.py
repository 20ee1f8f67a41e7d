"""Hello-world throughput of fleetplane's HTTP server (``dataplane/http``) vs aiohttp, same run.

Each server runs in its own process on uvloop (one core's worth of Python); the load comes from
``wrk`` (keep-alive HTTP/1.1, bounded duration) or, when wrk is missing, from the shared Python
load generator ``bench/loadgen.py``. Server CPU per request is read from ``/proc``.

    .venv/bin/python bench/http_server.py [--duration-s 2] [--rounds 3] [--connections 32]

wrk: ``apt-get install -y wrk`` (Debian/Ubuntu). Ratios are the figures to trust: the machine
is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BODY = b"Hello, World!"
SERVERS = ("fleetplane-async", "fleetplane-sync", "aiohttp")


# -- the servers (run in child processes) -----------------------------------------------------


def _serve_fleetplane(sync: bool) -> None:
    import uvloop

    from dataplane.http import Request, Responder, start_server

    headers = [(b"content-type", b"text/plain")]

    async def handler(req: Request, resp: Responder) -> None:
        resp.respond(200, headers, BODY)

    def sync_handler(req: Request, resp: Responder) -> None:
        resp.respond(200, headers, BODY)

    async def main() -> None:
        server = await start_server(sync_handler if sync else handler, "127.0.0.1", 0)
        print(server.port, flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


def _serve_aiohttp() -> None:
    import uvloop
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    uvloop.run(main())


# -- the driver -------------------------------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk(port: int, duration_s: float, connections: int) -> tuple[int, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s", f"http://127.0.0.1:{port}/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not match or "Non-2xx" in out:
        raise RuntimeError(f"wrk run failed:\n{out}")
    elapsed = float(match.group(2)) / (1000 if match.group(3) == "ms" else 1)
    return int(match.group(1)), elapsed


def _pyload(port: int, duration_s: float, connections: int) -> tuple[int, float]:
    from bench.loadgen import run_load

    request = f"GET / HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
    total = int(duration_s * 8000)
    started = time.perf_counter()
    result = asyncio.run(run_load("127.0.0.1", port, request, concurrency=connections, total=total))
    if result.errors:
        raise RuntimeError(f"{result.errors} failed requests")
    return result.ok, time.perf_counter() - started


def _start(kind: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def measure(duration_s: float, connections: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Best (req/s, server CPU µs per request) per server over interleaved rounds.

    All servers are up for the whole run and take turns, so a burst of load from other
    processes on this shared machine hits them alike; the best round is the least disturbed.
    """
    load = _wrk if shutil.which("wrk") else _pyload
    procs = {kind: _start(kind) for kind in SERVERS}
    best: dict[str, tuple[float, float]] = {}
    try:
        for _, port in procs.values():
            load(port, 1, connections)  # warm-up
        for _ in range(rounds):
            for kind, (proc, port) in procs.items():
                cpu0 = _cpu_s(proc.pid)
                count, elapsed = load(port, duration_s, connections)
                rps, cpu_us = count / elapsed, (_cpu_s(proc.pid) - cpu0) / count * 1e6
                old = best.get(kind)
                best[kind] = (rps, cpu_us) if old is None else (max(old[0], rps), min(old[1], cpu_us))
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(5)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration-s", type=float, default=2.0, help="per server per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "aiohttp":
        _serve_aiohttp()
        return 0
    if args.serve:
        _serve_fleetplane(sync=args.serve == "fleetplane-sync")
        return 0
    if shutil.which("wrk"):
        gen = "wrk -t1"
    else:
        gen = "bench/loadgen.py (wrk not found: `apt-get install -y wrk` for the reference figures)"
    print(
        f"load: {gen}, {args.connections} keep-alive connections, "
        f"best of {args.rounds} interleaved rounds of {args.duration_s:g} s per server"
    )
    results = measure(args.duration_s, args.connections, args.rounds)
    base_rps, base_cpu = results["aiohttp"]
    print(f"{'server':<18} {'req/s':>9} {'vs aiohttp':>11} {'CPU us/req':>11} {'vs aiohttp':>11}")
    for kind, (rps, cpu) in results.items():
        print(f"{kind:<18} {rps:>9.0f} {rps / base_rps:>10.2f}x {cpu:>11.1f} {cpu / base_cpu:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
