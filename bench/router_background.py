"""A router's CPU between requests: what its control-plane subscription costs, in one run.

    python bench/router_background.py [--seconds 8] [--workers 2,100,1000]

**Live** (inside a loopback-only namespace, ``--no-netns`` to skip): two engine-sims with their
load publishers on, a control plane holding them and a contract, and two routers that serve no
request, in the compiled form when it is built (else the plain one):

- ``standalone``: ``--worker`` both engines, ``--override-sampling-params`` (no control plane):
  the baseline, what a router serving nothing costs on its own (health probes, timers);
- ``subscribed``: ``--control-plane``, ``--router-id``, ``least_load``, the access log: the
  contract and load-view streams, the status reports (a look every 0.25 s), gRPC's threads.

Their CPU per second (``/proc`` schedstat, all threads; the main thread apart), first with the
engines idle (the control plane pushes a load message when a view changes: a few a second), then
while wrk streams through one engine at a paced decode (its view changes every push: ~20 load
messages a second, ``--load-push-interval-ms`` 50). Divide by a fleet's request rate to get the
share per request: at 350 requests a second, 10 ms/s is ~30 µs a request.

**In memory**: ``ControlPlaneClient.apply_load_message`` of a one-worker delta into a router of
N workers (``--workers``), no gRPC: µs per message, and as a multiple of the smallest fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import chat_body, cpu_seconds, wrk_script  # noqa: E402
from bench.procs import (  # noqa: E402
    PY,
    Proc,
    compiled_form_missing,
    control_plane,
    free_port,
    in_loopback_namespace,
    publishing_engine,
    spawn,
    wait_http,
)

MODEL = "sim-model"
CONTRACT = '{"temperature": {"min": 0.0, "max": 1.5, "default": 0.7}, "top_p": 0.95}'
DECODE_TOKENS_PER_S = 200  # a stream's events 5 ms apart: the engine's view changes every push


def _main_thread_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
        return int(f.read().split()[0]) / 1e9


def _router(name: str, logs: Path, env: dict[str, str], *flags: str) -> Proc:
    port = free_port()
    argv = [PY, "-m", "dataplane", "--listen", f"127.0.0.1:{port}", *flags]
    return spawn(name, argv, port, logs, env)


def _wrk(port: int, seconds: float, logs: Path) -> subprocess.Popen[bytes]:
    body = chat_body(MODEL, stream=True, size=1024, max_tokens=16)
    script = logs / "stream.lua"
    script.write_text(wrk_script(body, (("Content-Type", "application/json"),)))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    argv = ["wrk", "-t1", "-c32", f"-d{round(seconds) + 2}s", "-s", str(script), url]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def live(seconds: float) -> None:
    logs = Path(tempfile.mkdtemp(prefix="router-background-"))
    model_dir = logs / "model"
    model_dir.mkdir()
    procs: list[Proc] = []
    rows: list[tuple[str, str, float, float]] = []
    compiled = compiled_form_missing(ROOT) is None
    env = dict(os.environ, FLEETPLANE_FORM="compiled" if compiled else "plain")
    try:
        engines = [
            publishing_engine(f"sim-{i}", MODEL, logs, model_dir, DECODE_TOKENS_PER_S) for i in range(2)
        ]
        procs += engines
        for e in engines:
            wait_http(e, "/health")
        plane, address = control_plane("control", engines, False, logs, CONTRACT)
        procs.append(plane)
        workers = [f for e in engines for f in ("--worker", f"http://127.0.0.1:{e.port}")]
        routers = {
            "standalone": _router("standalone", logs, env, *workers, "--override-sampling-params", CONTRACT),
            "subscribed": _router(
                "subscribed",
                logs,
                env,
                *("--control-plane", address, "--router-id", "bench", "--policy", "least_load"),
                *("--access-log", str(logs / "access.jsonl")),
            ),
        }
        procs += routers.values()
        for r in routers.values():
            wait_http(r, "/v1/models")
        time.sleep(3.0)  # past the start: first views, first reports, connections made
        for phase in ("engines idle", "one engine streaming"):
            load = _wrk(engines[0].port, seconds, logs) if phase != "engines idle" else None
            if load is not None:
                time.sleep(1.0)  # the decode running, the views changing
            start = {
                name: (cpu_seconds(r.popen.pid), _main_thread_seconds(r.popen.pid))
                for name, r in routers.items()
            }
            time.sleep(seconds)
            for name, r in routers.items():
                cpu, main = (
                    cpu_seconds(r.popen.pid) - start[name][0],
                    _main_thread_seconds(r.popen.pid) - start[name][1],
                )
                rows.append((phase, name, cpu / seconds * 1e3, main / seconds * 1e3))
            if load is not None:
                load.wait(timeout=30)
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(logs, ignore_errors=True)
    print(
        f"live, {env['FLEETPLANE_FORM']} form, {seconds:g} s per phase; load average {os.getloadavg()[0]:.1f}"
    )
    print("| engines | router | CPU ms/s | main thread ms/s | vs standalone |")
    print("|---|---|---:|---:|---:|")
    for phase, name, cpu, main in rows:
        base = next(c for p, n, c, _ in rows if p == phase and n == "standalone")
        print(f"| {phase} | {name} | {cpu:.2f} | {main:.2f} | {cpu / base:.1f}x |")


def in_memory(fleets: list[int]) -> None:
    from controlplane.v1 import load_pb2
    from dataplane.router.control.channel import control_settings
    from dataplane.router.control.client import ControlPlaneClient
    from dataplane.router.fleet.workers import WorkerSpec
    from dataplane.router.logs import configure_logging
    from dataplane.router.state import RouterState

    configure_logging(logging.WARNING)  # not a line per applied worker set

    class _NoPool:
        async def close(self) -> None:
            pass

    def view(url: str, running: int) -> load_pb2.WorkerLoad:
        return load_pb2.WorkerLoad(
            url=url,
            num_running_reqs=running,
            max_total_num_tokens=100_000,
            freshness=load_pb2.FRESHNESS_FRESH,
        )

    async def per_message(n: int) -> float:
        state = RouterState()
        urls = [f"http://10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:8000" for i in range(n)]
        state.apply_workers([WorkerSpec(url, "HTTP1", (MODEL,)) for url in urls], lambda _spec: _NoPool())  # type: ignore[arg-type,return-value]
        client = ControlPlaneClient(control_settings("127.0.0.1:1", "bench", None, None), state)
        client.apply_registry(
            [
                load_pb2.Worker(url=url, protocol=load_pb2.WORKER_PROTOCOL_HTTP1, models=[MODEL])
                for url in urls
            ]
        )
        client.apply_load_message(load_pb2.WatchLoadsResponse(full=True, workers=[view(u, 1) for u in urls]))
        deltas = [load_pb2.WatchLoadsResponse(workers=[view(urls[0], k % 7)]) for k in range(64)]
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for delta in deltas:
                client.apply_load_message(delta)
            best = min(best, (time.perf_counter() - started) / len(deltas))
        await client.close()
        return best * 1e6

    import dataplane.router.state as state_module

    form = "compiled" if str(state_module.__file__).endswith(".so") else "plain"
    print(f"\nin memory, {form} form: apply_load_message of a one-worker delta (fastest of 5 × 64)")
    print("| workers | µs per message | vs the smallest fleet |")
    print("|---:|---:|---:|")
    results = [(n, asyncio.run(per_message(n))) for n in fleets]
    for n, us in results:
        print(f"| {n} | {us:.1f} | {us / results[0][1]:.1f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=8.0, help="per phase")
    parser.add_argument("--workers", default="2,100,1000", help="fleet sizes for the in-memory part")
    parser.add_argument("--no-live", action="store_true", help="the in-memory part only")
    parser.add_argument("--no-netns", action="store_true", help="run in the current network namespace")
    args = parser.parse_args()
    if not args.no_live:
        if shutil.which("wrk") is None:
            print("wrk not found: apt-get install -y wrk", file=sys.stderr)
            return 2
        if not args.no_netns and (code := in_loopback_namespace()) is not None:
            return code  # ran inside a loopback-only namespace
        live(args.seconds)
    in_memory([int(n) for n in args.workers.split(",")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
