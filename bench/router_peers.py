"""fleetplane router vs the PyPI peers (sglang-router, vllm-router), same engine-sim workers, same load.

    python bench/router_peers.py [--requests 3000] [--concurrency 16] [--only NAME,...]

Targets, each in front of the same two engine-sim workers (one run, same machine):
  direct            engine-sim itself (the baseline every "added" figure subtracts)
  fleetplane-h1     ``python -m dataplane`` with the two HTTP/1.1 workers
  fleetplane-h2c    ``python -m dataplane`` with two h2c workers (``engine-sim --http2``)
  sglang-router     ``sglang-router launch`` (PyPI), HTTP/1.1 workers
  vllm-router       ``vllm-router`` (PyPI), HTTP/1.1 workers

Load: closed loop (``bench/loadgen.py``), 1 KiB chat body, non-streaming then streaming (16 tokens).
Reported per target: req/s, p50/p99 latency added over direct (last byte; streaming also first
event), and the router's CPU µs per request (``/proc`` schedstat of the router process tree).

The peers try to fetch tokenizers from the Hugging Face hub at start, so the whole benchmark runs
inside a fresh network namespace with loopback only (``unshare -n``; the script re-executes
itself there) and ``HF_HUB_OFFLINE=1``; engine-sim hands them a local model directory. Peers
come from a separate venv (``.bench-venv``, gitignored)::

    python3 -m venv .bench-venv && .bench-venv/bin/pip install sglang-router vllm-router
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import LoadResult, chat_body, cpu_seconds, post, run_load  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
PEERS = ROOT / ".bench-venv" / "bin"
NETNS_MARK = "FLEETPLANE_BENCH_NETNS"
MODEL = "sim-model"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    port: int

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _spawn(name: str, argv: list[str], port: int, log_dir: Path, env: dict[str, str] | None = None) -> Proc:
    log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    return Proc(name, proc, port)


def _wait_ready(p: Proc, path: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.proc.poll() is not None:
            raise RuntimeError(f"{p.name} exited with {p.proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p.port}{path}", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{p.name} not ready on {path} after {timeout_s}s")


def _engine(name: str, model_dir: Path, log_dir: Path, *extra: str) -> Proc:
    port = _free_port()
    argv = [PY, "-m", "dataplane.engine.sim", "--listen", f"127.0.0.1:{port}", "--model", MODEL]
    argv += ["--model-path", str(model_dir), *extra]
    return _spawn(name, argv, port, log_dir)


def _routers(h1: list[Proc], h2: list[Proc], log_dir: Path) -> dict[str, Callable[[], Proc]]:
    h1_urls = [f"http://127.0.0.1:{w.port}" for w in h1]
    h2_urls = [f"h2c://127.0.0.1:{w.port}" for w in h2]
    peer_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    def fleetplane(name: str, urls: list[str]) -> Callable[[], Proc]:
        def start() -> Proc:
            port = _free_port()
            argv = [PY, "-m", "dataplane", "--listen", f"127.0.0.1:{port}", "--policy", "round_robin"]
            argv += ["--max-concurrency", "1024"]
            for u in urls:
                argv += ["--worker", u]
            return _spawn(name, argv, port, log_dir)

        return start

    def sglang() -> Proc:
        port = _free_port()
        argv = [str(PEERS / "sglang-router"), "launch", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--policy", "round_robin", "--log-level", "warn", "--worker-urls", *h1_urls]
        argv += ["--prometheus-port", str(_free_port())]
        return _spawn("sglang-router", argv, port, log_dir, peer_env)

    def vllm() -> Proc:
        port = _free_port()
        argv = [str(PEERS / "vllm-router"), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--policy", "round_robin", "--log-level", "warning", "--worker-urls", *h1_urls]
        argv += ["--prometheus-port", str(_free_port())]
        return _spawn("vllm-router", argv, port, log_dir, peer_env)

    return {
        "fleetplane-h1": fleetplane("fleetplane-h1", h1_urls),
        "fleetplane-h2c": fleetplane("fleetplane-h2c", h2_urls),
        "sglang-router": sglang,
        "vllm-router": vllm,
    }


@dataclass
class Row:
    target: str
    mode: str
    result: LoadResult
    cpu_us_per_req: float | None


async def _load(ports: list[int], stream: bool, requests: int, concurrency: int) -> LoadResult:
    # Direct load is split over both engines, as the routers split it: same engine capacity.
    parts = await asyncio.gather(
        *(
            run_load(
                "127.0.0.1",
                port,
                post("127.0.0.1", port, "/v1/chat/completions", chat_body(MODEL, stream=stream)),
                concurrency=max(1, concurrency // len(ports)),
                total=requests // len(ports),
            )
            for port in ports
        )
    )
    merged = LoadResult(elapsed_s=max(p.elapsed_s for p in parts))
    for part in parts:
        merged.ok += part.ok
        merged.errors += part.errors
        merged.latencies_s += part.latencies_s
        merged.first_byte_s += part.first_byte_s
    merged.latencies_s.sort()
    merged.first_byte_s.sort()
    return merged


async def _measure(ports: list[int], pid: int | None, stream: bool, requests: int, concurrency: int) -> Row:
    await _load(ports, stream, min(300, requests), concurrency)  # warm-up
    cpu0 = cpu_seconds(pid) if pid else 0.0
    result = await _load(ports, stream, requests, concurrency)
    cpu = (cpu_seconds(pid) - cpu0) if pid else None
    per_req = None if cpu is None or not result.ok else cpu / result.ok * 1e6
    return Row("", "stream" if stream else "plain", result, per_req)


def _ms(x: float) -> str:
    return f"{x * 1e3:7.2f}"


def _table(rows: list[Row], skipped: dict[str, str]) -> str:
    direct = {r.mode: r for r in rows if r.target == "direct"}
    out = [
        "| target | mode | req/s | errors | p50 ms | p99 ms | added p50 ms | added p99 ms | "
        "added p50 first event ms | router CPU µs/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = direct.get(r.mode)
        res = r.result
        add50 = res.pct(0.5) - base.result.pct(0.5) if base and r.target != "direct" else 0.0
        add99 = res.pct(0.99) - base.result.pct(0.99) if base and r.target != "direct" else 0.0
        addfb = (
            res.pct(0.5, first_byte=True) - base.result.pct(0.5, first_byte=True)
            if base and r.target != "direct" and r.mode == "stream"
            else 0.0
        )
        cpu = "—" if r.cpu_us_per_req is None else f"{r.cpu_us_per_req:.0f}"
        out.append(
            f"| {r.target} | {r.mode} | {res.rps:.0f} | {res.errors} | {_ms(res.pct(0.5))} | "
            f"{_ms(res.pct(0.99))} | {_ms(add50)} | {_ms(add99)} | "
            f"{_ms(addfb) if r.mode == 'stream' else '—'} | {cpu} |"
        )
    for name, why in skipped.items():
        out.append(f"| {name} | — | not run: {why} | | | | | | | |")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="router-peers-"))
    model_dir = log_dir / "model"
    model_dir.mkdir()
    only = set(args.only.split(",")) if args.only else None
    procs: list[Proc] = []
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    try:
        h1 = [_engine(f"sim-h1-{i}", model_dir, log_dir) for i in range(2)]
        h2 = [_engine(f"sim-h2-{i}", model_dir, log_dir, "--http2") for i in range(2)]
        procs += h1 + h2
        for w in h1:
            _wait_ready(w, "/health")
        time.sleep(1.0)  # the h2c sims cannot be polled with urllib
        for stream in (False, True):
            row = asyncio.run(_measure([w.port for w in h1], None, stream, args.requests, args.concurrency))
            row.target = "direct"
            rows.append(row)
        for name, start in _routers(h1, h2, log_dir).items():
            if only is not None and name not in only:
                continue
            if name in ("sglang-router", "vllm-router") and not (PEERS / name).exists():
                skipped[name] = f"{PEERS / name} missing (install the peers into .bench-venv)"
                continue
            try:
                p = start()
                procs.append(p)
                _wait_ready(p, "/v1/models" if name.startswith("fleetplane") else "/health")
                time.sleep(0.5)
            except RuntimeError as exc:
                skipped[name] = f"{exc} (log: {log_dir / (name + '.log')})"
                continue
            for stream in (False, True):
                row = asyncio.run(_measure([p.port], p.proc.pid, stream, args.requests, args.concurrency))
                row.target = name
                rows.append(row)
            p.stop()
            procs.remove(p)
    finally:
        for p in procs:
            p.stop()
    print(f"requests={args.requests} concurrency={args.concurrency} body=1 KiB chat, max_tokens=16")
    print(_table(rows, skipped))
    if not args.keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", default="", help="comma-separated router targets")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--no-netns", action="store_true", help="run in the current network namespace")
    args = parser.parse_args()
    if os.environ.get(NETNS_MARK) != "1" and not args.no_netns:
        # Loopback-only namespace: the peers cannot reach any hub (see the module docstring).
        env = dict(os.environ, **{NETNS_MARK: "1"})
        script = 'ip link set lo up && exec "$0" "$@"'
        argv = ["unshare", "-n", "sh", "-c", script, sys.executable, *sys.argv]
        return subprocess.call(argv, env=env)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
