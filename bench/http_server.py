"""Hello-world throughput of fleetplane's HTTP server (``dataplane/http``) vs aiohttp, same run.

Each server runs in its own process on uvloop (one core's worth of Python); the load comes from
``wrk`` (keep-alive HTTP/1.1, bounded duration) or, when wrk is missing, from the shared Python
load generator ``bench/loadgen.py``. Server CPU per request is read from ``/proc``.

    .venv/bin/python bench/http_server.py [--duration-s 2] [--rounds 3] [--connections 32]

wrk: ``apt-get install -y wrk`` (Debian/Ubuntu). Ratios are the figures to trust: the machine
is shared and noisy.

A second table isolates the layer's own Python cost: requests fed to one connection object with
a fake transport (no sockets, no syscalls), CPU per request minus one bare event-loop turn,
for HTTP/1.1 and h2c with a synchronous and an ``async def`` handler.
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


# -- in-process layer cost -----------------------------------------------------------------------


class _NullTransport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _h2_frames(count: int) -> tuple[bytes, list[bytes]]:
    import h2.config
    import h2.connection

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    preface = client.data_to_send()
    frames = []
    for _ in range(count):
        sid = client.get_next_available_stream_id()
        client.send_headers(
            sid,
            [
                (b":method", b"GET"),
                (b":path", b"/"),
                (b":scheme", b"http"),
                (b":authority", b"127.0.0.1:8080"),
            ],
            end_stream=True,
        )
        frames.append(client.data_to_send())
        del client.streams[sid]  # the answers are never fed back: keep the client small
    return preface, frames


def _layer_costs(count: int, rounds: int) -> dict[str, float]:
    import uvloop

    from dataplane.http.context import ServerContext
    from dataplane.http.http1 import Http1Connection
    from dataplane.http.http2 import Http2Connection
    from dataplane.http.limits import ServerLimits
    from dataplane.http.request import Handler, Request, Responder

    headers = [(b"content-type", b"text/plain")]
    h1_request = b"GET / HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nuser-agent: wrk\r\naccept: */*\r\n\r\n"

    def sync_handler(req: Request, resp: Responder) -> None:
        resp.respond(200, headers, BODY)

    async def async_handler(req: Request, resp: Responder) -> None:
        resp.respond(200, headers, BODY)

    async def loop_turns() -> float:
        started = time.process_time()
        for _ in range(count):
            await asyncio.sleep(0)
        return time.process_time() - started

    async def feed(proto: str, handler: Handler) -> float:
        ctx = ServerContext(handler=handler, limits=ServerLimits(), loop=asyncio.get_running_loop())
        if proto == "h1":
            conn: Http1Connection | Http2Connection = Http1Connection(ctx)
            chunks = [h1_request] * count
            conn.connection_made(_NullTransport())
            conn.data_received(b"")  # detection done before timing
        else:
            conn = Http2Connection(ctx)
            preface, chunks = _h2_frames(count)
            conn.connection_made(_NullTransport())
            conn.data_received(preface)
        started = time.process_time()
        for chunk in chunks:
            conn.data_received(chunk)
            await asyncio.sleep(0)
        return time.process_time() - started

    async def run() -> dict[str, float]:
        best: dict[str, float] = {}
        cases = {
            "h1 sync handler": ("h1", sync_handler),
            "h1 async handler": ("h1", async_handler),
            "h2c sync handler": ("h2", sync_handler),
            "h2c async handler": ("h2", async_handler),
        }
        for _ in range(rounds):
            base = await loop_turns()
            for name, (proto, handler) in cases.items():
                cost = (await feed(proto, handler) - base) / count * 1e6
                best[name] = min(best.get(name, cost), cost)
        return best

    return uvloop.run(run())


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
    parser.add_argument("--layer-only", action="store_true", help="only the in-process table")
    args = parser.parse_args()
    if args.serve == "aiohttp":
        _serve_aiohttp()
        return 0
    if args.serve:
        _serve_fleetplane(sync=args.serve == "fleetplane-sync")
        return 0
    if not args.layer_only:
        _print_load_table(args)
    print()
    print("layer CPU per request, in process (fake transport, no syscalls), best of 5 rounds")
    print(f"{'case':<20} {'us/req':>8}")
    for name, cost_us in _layer_costs(5000, 5).items():
        print(f"{name:<20} {cost_us:>8.1f}")
    return 0


def _print_load_table(args: argparse.Namespace) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
