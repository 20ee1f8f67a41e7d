"""fleetplane router vs the PyPI peers (sglang-router, vllm-router), same engine-sim workers, same load.

    python bench/router_peers.py [--requests 3000] [--concurrency 16] [--only NAME,...]

Targets, each in front of the same two engine-sim workers (one run, same machine):
  direct            engine-sim itself (the baseline every "added" figure subtracts)
  fleetplane-h1     ``python -m dataplane`` with the two HTTP/1.1 workers
  fleetplane-h2c    ``python -m dataplane`` with two h2c workers (``engine-sim --http2``)
  sglang-router     ``sglang-router launch`` (PyPI), HTTP/1.1 workers
  vllm-router       ``vllm-router`` (PyPI), HTTP/1.1 workers

Load: closed loop (``bench/loadgen.py``), 1 KiB chat body, non-streaming then streaming (16 tokens).
Per target and mode, two phases: ``--latency-requests`` sequential requests (concurrency 1: on a
2-core box any concurrency saturates the CPU and latency then measures queueing, not the hop)
give p50/p99 and the latency added over the direct baseline (``direct`` for HTTP/1.1 targets,
``direct-h2c`` — the same h2c engines driven through ``H2Pool`` — for the h2c target); then
``--requests`` at ``--concurrency`` give req/s and the router's CPU µs per request (``/proc``
schedstat of the router process tree, every thread).

The peers try to fetch tokenizers from the Hugging Face hub at start, so the whole benchmark runs
inside a fresh network namespace with loopback only (``unshare -n``; the script re-executes
itself there) and ``HF_HUB_OFFLINE=1``; engine-sim hands them a local model directory. Peers
come from a separate venv (``.bench-venv``, gitignored)::

    python3 -m venv .bench-venv && .bench-venv/bin/pip install sglang-router vllm-router
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import LoadResult, chat_body, cpu_seconds, post, run_load  # noqa: E402
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

MODEL = "sim-model"


def _engine(name: str, model_dir: Path, log_dir: Path, *extra: str) -> Proc:
    port = free_port()
    return spawn(
        name, engine_sim_argv(port, MODEL, model_dir, "--decode-tokens-per-s", "0", *extra), port, log_dir
    )


def _routers(h1: list[Proc], h2: list[Proc], log_dir: Path) -> dict[str, Callable[[], Proc]]:
    h1_urls = [f"http://127.0.0.1:{w.port}" for w in h1]
    h2_urls = [f"h2c://127.0.0.1:{w.port}" for w in h2]

    def fleetplane(name: str, urls: list[str]) -> Callable[[], Proc]:
        def start() -> Proc:
            port = free_port()
            argv = [PY, "-m", "dataplane", "--listen", f"127.0.0.1:{port}", "--policy", "round_robin"]
            argv += ["--max-concurrency", "1024"]
            for u in urls:
                argv += ["--worker", u]
            return spawn(name, argv, port, log_dir)

        return start

    def peer(kind: str) -> Callable[[], Proc]:
        def start() -> Proc:
            port = free_port()
            return spawn(kind, peer_argv(kind, port, h1_urls, "round_robin"), port, log_dir, peer_env())

        return start

    return {
        "fleetplane-h1": fleetplane("fleetplane-h1", h1_urls),
        "fleetplane-h2c": fleetplane("fleetplane-h2c", h2_urls),
        "sglang-router": peer("sglang-router"),
        "vllm-router": peer("vllm-router"),
    }


@dataclass
class Row:
    target: str
    mode: str
    throughput: LoadResult  # concurrency N: req/s and CPU
    latency: LoadResult  # concurrency 1: latency without queueing on a saturated 2-core box
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


async def _h2c_latency(ports: list[int], stream: bool, requests: int) -> LoadResult:
    """Concurrency-1 latency straight to h2c engines (the h2c targets' baseline), via H2Pool."""
    from dataplane.router.upstream.h2c.pool import H2Pool

    pools = [H2Pool("127.0.0.1", port) for port in ports]
    body = chat_body(MODEL, stream=stream)
    headers = [(b"content-type", b"application/json")]
    result = LoadResult()
    start = time.perf_counter()
    for i in range(requests):
        t0 = time.perf_counter()
        resp = await pools[i % len(pools)].request(
            b"POST", b"/v1/chat/completions", headers, body, timeout_s=30
        )
        first = 0.0
        if resp.buffered_body() is None:
            async for _ in resp.chunks():
                first = first or time.perf_counter()
        now = time.perf_counter()
        result.ok += resp.status == 200
        result.latencies_s.append(now - t0)
        result.first_byte_s.append((first or now) - t0)
    result.elapsed_s = time.perf_counter() - start
    result.latencies_s.sort()
    result.first_byte_s.sort()
    for pool in pools:
        await pool.close()
    return result


async def _measure(
    ports: list[int],
    pid: int | None,
    stream: bool,
    args: argparse.Namespace,
    h2c_ports: list[int] | None = None,
) -> Row:
    await _load(ports, stream, min(300, args.requests), args.concurrency)  # warm-up
    if h2c_ports is not None:
        latency = await _h2c_latency(h2c_ports, stream, args.latency_requests)
        return Row("", "stream" if stream else "plain", LoadResult(), latency, None)
    latency = await _load(ports[:1], stream, args.latency_requests, 1)
    cpu0 = cpu_seconds(pid) if pid else 0.0
    result = await _load(ports, stream, args.requests, args.concurrency)
    cpu = (cpu_seconds(pid) - cpu0) if pid else None
    per_req = None if cpu is None or not result.ok else cpu / result.ok * 1e6
    return Row("", "stream" if stream else "plain", result, latency, per_req)


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def _table(rows: list[Row], skipped: dict[str, str]) -> str:
    base = {(r.target, r.mode): r.latency for r in rows if r.target.startswith("direct")}
    out = [
        "| target | mode | req/s (c=N) | errors | p50 ms (c=1) | p99 ms (c=1) | added p50 ms | "
        "added p99 ms | added p50 first event ms | router CPU µs/req |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lat = r.latency
        ref = base.get(("direct-h2c" if r.target.endswith("h2c") else "direct", r.mode))
        is_base = r.target.startswith("direct")
        add50 = "—" if is_base or ref is None else _ms(lat.pct(0.5) - ref.pct(0.5))
        add99 = "—" if is_base or ref is None else _ms(lat.pct(0.99) - ref.pct(0.99))
        addfb = (
            _ms(lat.pct(0.5, first_byte=True) - ref.pct(0.5, first_byte=True))
            if not is_base and ref is not None and r.mode == "stream"
            else "—"
        )
        rps = f"{r.throughput.rps:.0f}" if r.throughput.ok else "—"
        cpu = "—" if r.cpu_us_per_req is None else f"{r.cpu_us_per_req:.0f}"
        errors = r.throughput.errors + lat.errors
        out.append(
            f"| {r.target} | {r.mode} | {rps} | {errors} | {_ms(lat.pct(0.5))} | {_ms(lat.pct(0.99))} | "
            f"{add50} | {add99} | {addfb} | {cpu} |"
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
            wait_http(w, "/health")
        time.sleep(1.0)  # the h2c sims cannot be polled with urllib
        for stream in (False, True):
            row = asyncio.run(_measure([w.port for w in h1], None, stream, args))
            row.target = "direct"
            rows.append(row)
        for stream in (False, True):
            row = asyncio.run(_measure([w.port for w in h1], None, stream, args, [w.port for w in h2]))
            row.target = "direct-h2c"
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
                wait_http(p, "/v1/models" if name.startswith("fleetplane") else "/health")
                time.sleep(0.5)
            except RuntimeError as exc:
                skipped[name] = f"{exc} (log: {log_dir / (name + '.log')})"
                continue
            for stream in (False, True):
                row = asyncio.run(_measure([p.port], p.popen.pid, stream, args))
                row.target = name
                rows.append(row)
            p.stop()
            procs.remove(p)
    finally:
        for p in procs:
            p.stop()
    print(
        f"requests={args.requests} concurrency={args.concurrency} latency_requests={args.latency_requests} "
        "body=1 KiB chat, max_tokens=16"
    )
    print(_table(rows, skipped))
    if not args.keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8, help="connections for req/s and CPU")
    parser.add_argument("--latency-requests", type=int, default=400, help="sequential, for latency")
    parser.add_argument("--only", default="", help="comma-separated router targets")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--no-netns", action="store_true", help="run in the current network namespace")
    args = parser.parse_args()
    if not args.no_netns and (code := in_loopback_namespace()) is not None:
        return code  # ran inside a loopback-only namespace: the peers cannot reach any hub
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
