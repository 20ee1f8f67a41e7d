"""engine-sim throughput vs an aiohttp hello-world, measured in the same run.

engine-sim must never be the bottleneck of a router benchmark: at ``--decode-tokens-per-s 0``
it should serve at least as many small non-streaming chat completions per second as an
aiohttp hello-world serves ``GET /`` on the same machine. Each server runs in its own
process; the load comes from ``wrk`` (1 thread, keep-alive connections) when installed,
else from a small keep-alive HTTP/1.1 client in a separate process. Rounds alternate
between servers; medians are reported, and the server's CPU time per request (from
/proc), which a busy shared machine disturbs far less than wall-clock throughput.

    .venv/bin/python bench/engine_sim.py [--duration-s 3] [--rounds 3] [--connections 32]
"""

from __future__ import annotations

import argparse
import asyncio
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
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
CHAT_BODY = json.dumps(
    {"model": "sim-model", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8}
).encode()


@dataclass(frozen=True)
class Target:
    name: str
    server: str  # "engine-sim" | "aiohttp" | "aiohttp+uvloop"
    method: str
    path: str
    body: bytes = b""


TARGETS = [
    Target("aiohttp hello-world (baseline)", "aiohttp", "GET", "/"),
    Target("aiohttp+uvloop hello-world", "aiohttp+uvloop", "GET", "/"),
    Target("engine-sim POST /v1/chat/completions", "engine-sim", "POST", "/v1/chat/completions", CHAT_BODY),
    Target("engine-sim GET /health", "engine-sim", "GET", "/health"),
]


# -- servers ----------------------------------------------------------------------------------
def serve_aiohttp(use_uvloop: bool) -> None:
    """The baseline: aiohttp's documented hello-world handler."""
    from aiohttp import web

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="Hello, World!")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"aiohttp listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    if use_uvloop:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def start_server(kind: str) -> tuple[subprocess.Popen[str], int]:
    if kind == "engine-sim":
        cmd = [
            sys.executable,
            "-m",
            "dataplane.engine.sim",
            "--listen",
            "127.0.0.1:0",
            "--decode-tokens-per-s",
            "0",
        ]
    else:
        cmd = [sys.executable, __file__, "--serve", kind]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"{kind} did not start: {line!r}")
    return proc, int(match.group(1))


# -- load -------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(target: Target, port: int, duration_s: float, connections: int) -> tuple[int, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "{target.method}"\n')
        if target.body:
            script.write(f"wrk.body = {json.dumps(target.body.decode())}\n")
            script.write('wrk.headers["Content-Type"] = "application/json"\n')
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "-s", script.name,
             f"http://127.0.0.1:{port}{target.path}"],
            capture_output=True, text=True, timeout=duration_s + 30, check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(script.name)
    if "Non-2xx" in out:
        raise SystemExit(f"{target.name}: non-2xx answers:\n{out}")
    count = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    assert count, out
    seconds = float(count.group(2)) / (1000.0 if count.group(3) == "ms" else 1.0)
    return int(count.group(1)), seconds


async def _client(port: int, request: bytes, stop_at: float, counter: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            await reader.readexactly(length)
            counter[0] += 1
    finally:
        writer.close()


def python_load(port: int, method: str, path: str, body: bytes, duration_s: float, connections: int) -> None:
    """The fallback load generator (run in its own process): prints requests per second."""
    request = (
        f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    counter = [0]

    async def main() -> None:
        stop_at = time.monotonic() + duration_s
        await asyncio.gather(*(_client(port, request, stop_at, counter) for _ in range(connections)))

    started = time.monotonic()
    asyncio.run(main())
    print(counter[0], time.monotonic() - started)


def run_python_load(target: Target, port: int, duration_s: float, connections: int) -> tuple[int, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--load", str(port), target.method, target.path, target.body.decode(),
         str(duration_s), str(connections)],
        capture_output=True, text=True, timeout=duration_s + 30, check=True,
    ).stdout  # fmt: skip
    count, seconds = out.split()
    return int(count), float(seconds)


# -- the benchmark ----------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--loadgen", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_aiohttp(use_uvloop=args.serve == "aiohttp+uvloop")
        return 0
    if args.load:
        port, method, path, body, duration, conns = args.load
        python_load(int(port), method, path, body.encode(), float(duration), int(conns))
        return 0
    use_wrk = args.loadgen == "wrk" or (args.loadgen == "auto" and shutil.which("wrk") is not None)
    load = run_wrk if use_wrk else run_python_load
    servers = {kind: start_server(kind) for kind in sorted({t.server for t in TARGETS})}
    rps: dict[str, list[float]] = {t.name: [] for t in TARGETS}
    cpu_us: dict[str, list[float]] = {t.name: [] for t in TARGETS}
    try:
        for _ in range(args.rounds):
            for target in TARGETS:
                proc, port = servers[target.server]
                cpu_before = cpu_seconds(proc.pid)
                count, seconds = load(target, port, args.duration_s, args.connections)
                cpu_used = cpu_seconds(proc.pid) - cpu_before
                rps[target.name].append(count / seconds)
                cpu_us[target.name].append(cpu_used * 1e6 / max(count, 1))
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    base = TARGETS[0].name
    gen = "wrk -t1" if use_wrk else "python keep-alive client"
    print(
        f"load: {gen}, {args.connections} connections, {args.duration_s:g} s x {args.rounds} rounds (median)"
    )
    print("server CPU per request is the robust figure on a shared machine: capacity = 1e6 / CPU us")
    print(f"{'target':<40} {'req/s':>8} {'ratio':>6} {'CPU us/req':>11} {'capacity ratio':>15}")
    for target in TARGETS:
        name = target.name
        ratio = median(rps[name]) / median(rps[base])
        capacity = median(cpu_us[base]) / median(cpu_us[name])
        print(
            f"{name:<40} {median(rps[name]):>8.0f} {ratio:>5.2f}x {median(cpu_us[name]):>11.1f} {capacity:>14.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
