"""The live part of bench/routing_quality.py: scenario two-routers on real processes.

Per target, fresh processes on loopback: 4 ``engine-sim`` (4 running slots, the calibrated step
model, load publishing ``auto``), then either a control plane (SQLite, ``--load-push-interval-ms
50``, the engines registered and discovered) with two ``fleetplane router`` processes subscribed
to it, or two peer routers (sglang-router / vllm-router from ``.bench-venv``, which poll the
engines' ``/get_load``). The trace of the model (same seed) is replayed on the wall clock as
streamed chats, each sent to router A, router B or straight to engine 0 as the trace says; TTFT is
the time from sending to the first SSE data chunk. Everything is stopped by PID; the whole run
happens in a fresh network namespace with loopback only (``unshare -n``) and ``HF_HUB_OFFLINE=1``,
as bench/router_peers.py does, so the peers never reach a hub.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs import (  # noqa: E402
    PEERS,
    PY,
    Proc,
    engine_sim_argv,
    free_port,
    in_loopback_namespace,
    peer_argv,
    peer_env,
    spawn,
    wait_http,
)
from bench.routing_model import Arrival  # noqa: E402
from bench.routing_quality import SCENARIOS, Row, pct, table, trace  # noqa: E402

MODEL = "sim-model"
DEADLINE_S = 240.0


def _free_range(count: int) -> int:
    for _ in range(200):
        base = free_port()
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok and base + count < 65535:
            return base
    raise RuntimeError("no free port range")


def _engines(logs: Path, model_dir: Path) -> list[Proc]:
    out = []
    for i in range(4):
        port, kv = free_port(), _free_range(2)
        argv = engine_sim_argv(port, MODEL, model_dir, "--max-running-requests", "4")
        argv += ["--kv-events-endpoint", f"tcp://*:{kv}", "--load-publish-endpoint", "auto"]
        out.append(spawn(f"engine-{i}", argv, port, logs))
    for p in out:
        wait_http(p, "/health")
    return out


def _fleetplane(engines: list[Proc], policy: str, logs: Path) -> list[Proc]:
    import grpc

    from controlplane.v1 import load_pb2, load_pb2_grpc

    grpc_port, http_port = free_port(), free_port()
    argv = [PY, "-m", "controlplane", "--listen", f"127.0.0.1:{grpc_port}"]
    argv += ["--http-listen", f"127.0.0.1:{http_port}", "--store", f"sqlite:{logs / 'cp.db'}"]
    plane = spawn("control", [*argv, "--load-push-interval-ms", "50"], http_port, logs)
    wait_http(plane, "/healthz")
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = load_pb2_grpc.LoadServiceStub(channel)
        for e in engines:
            stub.RegisterWorker(load_pb2.RegisterWorkerRequest(url=f"http://127.0.0.1:{e.port}"), timeout=30)
    routers = []
    for name in ("router-a", "router-b"):
        port = free_port()
        argv = [
            PY,
            "-m",
            "dataplane",
            "--listen",
            f"127.0.0.1:{port}",
            "--control-plane",
            f"127.0.0.1:{grpc_port}",
        ]
        argv += ["--policy", policy, "--router-id", name, "--max-concurrency", "1024"]
        routers.append(spawn(name, argv, port, logs))
    for r in routers:
        wait_http(r, "/readiness")
    time.sleep(1.0)  # the first load views
    return [plane, *routers]


def _peers(kind: str, policy: str, engines: list[Proc], logs: Path) -> list[Proc]:
    urls = [f"http://127.0.0.1:{e.port}" for e in engines]
    out = []
    for name in ("peer-a", "peer-b"):
        port = free_port()
        out.append(spawn(name, peer_argv(kind, port, urls, policy), port, logs, peer_env()))
    for p in out:
        wait_http(p, "/health")
    time.sleep(1.0)
    return out


async def _one(port: int, arrival: Arrival, start: float) -> tuple[float, float] | None:
    """Send one streamed chat at its arrival time; (TTFT, e2e) in seconds, None on failure."""
    await asyncio.sleep(max(0.0, start + arrival.at - time.monotonic()))
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "x" * (4 * arrival.prompt_tokens)}],
            "max_tokens": arrival.max_tokens,
            "stream": True,
        }
    ).encode()
    sent = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return None
        first = 0.0
        seen = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            if not first and b"data:" in chunk:
                first = time.monotonic()
            seen = (seen + chunk)[-64:]
            if b"[DONE]" in seen:
                break
        return (first - sent, time.monotonic() - sent) if first else None
    except (OSError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


async def _replay(
    ports: tuple[int, int], direct: int, arrivals: list[Arrival]
) -> list[tuple[float, float] | None]:
    start = time.monotonic() + 0.5
    tasks = [_one(direct if a.source < 0 else ports[a.source], a, start) for a in arrivals]
    return await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)


def run_live(args: argparse.Namespace) -> list[Row]:
    arrivals = trace(SCENARIOS["two-routers"], args.live_requests, 1)
    targets: list[tuple[str, str, str]] = [
        ("fleetplane", "least_load", ""),
        ("fleetplane", "least_request", ""),
    ]
    if args.peers:
        targets += [
            ("sglang-router", "cache_aware", ""),
            ("sglang-router", "power_of_two", ""),
            ("vllm-router", "power_of_two", ""),
        ]
    rows: list[Row] = []
    for kind, policy, _ in targets:
        if kind != "fleetplane" and not (PEERS / kind).exists():
            print(f"# {kind} not installed in .bench-venv: skipped", flush=True)
            continue
        logs = Path(tempfile.mkdtemp(prefix="routing-live-"))
        model_dir = logs / "model"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps({"architectures": ["SimForCausalLM"]}))
        procs: list[Proc] = []
        try:
            engines = _engines(logs, model_dir)
            procs += engines
            front = (
                _fleetplane(engines, policy, logs)
                if kind == "fleetplane"
                else _peers(kind, policy, engines, logs)
            )
            procs += front
            routers = [p for p in front if p.name != "control"]
            results = asyncio.run(_replay((routers[0].port, routers[1].port), engines[0].port, arrivals))
        except (RuntimeError, TimeoutError) as exc:
            print(f"# {kind} {policy}: {exc} (logs: {logs})", flush=True)
            continue
        finally:
            for p in reversed(procs):
                p.stop()
        ok = [r for r in results if r is not None]
        failed = len(results) - len(ok)
        ttft = [r[0] for r in ok]
        e2e = [r[1] for r in ok]
        target = f"{kind} {policy}" + (f" ({failed} failed)" if failed else "")
        rows.append(
            Row(
                "two-routers (live)",
                target,
                pct(ttft, 0.5) * 1e3,
                pct(ttft, 0.99) * 1e3,
                pct(e2e, 0.99) * 1e3,
            )
        )
        print(f"# {target}: p99 TTFT {rows[-1].p99_ms:.0f} ms", flush=True)
        if not args.keep_logs:
            shutil.rmtree(logs, ignore_errors=True)
    return rows


def live_main(args: argparse.Namespace) -> int:
    if not args.no_netns and (code := in_loopback_namespace()) is not None:
        return code  # ran inside a loopback-only namespace: the peers cannot reach any hub
    print(f"routing quality, live: scenario two-routers, {args.live_requests} requests per target, seed 1")
    print(table(run_live(args), ""))
    return 0
