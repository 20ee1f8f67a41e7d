"""WatchContracts fan-out latency and UpdateContract throughput (SPEC §6).

One control plane (subprocess, SQLite WAL + synchronous=FULL in a temp dir). For N watch streams
spread over client processes, time from UpdateContract returning to each watcher holding that
revision (or a newer one: a slow watcher may skip, SPEC §6): p50/p99/max; a delivery that beats
the writer's own return counts as 0. The same from the moment UpdateContract was sent (never
negative; the ratio column compares it with N=1, the same-run baseline). Then UpdateContract throughput (each write fsynced before it is acknowledged) against
GetContract (served from memory) and a raw single-row SQLite commit loop with the same pragmas.

    .venv/bin/python bench/watch_fanout.py                 # N = 1, 100, 1000 (about a minute)
    .venv/bin/python bench/watch_fanout.py --watchers 100  # one size

Timestamps are CLOCK_MONOTONIC (``time.monotonic``), shared by every process on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from controlplane.contracts import contract_to_proto_params, parse_contract_json  # noqa: E402
from controlplane.store.database import PRAGMAS  # noqa: E402
from controlplane.v1 import contract_pb2 as pb  # noqa: E402
from controlplane.v1 import contract_pb2_grpc  # noqa: E402

STREAMS_PER_CHANNEL = 100
TARGETS_P99_MS = {100: 100.0, 1000: 1000.0}


def _update_request(i: int, scope: str = "*") -> pb.UpdateContractRequest:
    text = f'{{"temperature": {(i % 200) / 100}, "top_p": 0.95, "top_k": {{"min": 1, "max": 50, "default": 40}}}}'
    params, policy = contract_to_proto_params(parse_contract_json(text))
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True)


# -- client process --------------------------------------------------------------------------


async def _client(target: str, streams: int) -> None:
    """Open ``streams`` watches; print "ready" once each has its first message, then record
    (revision, receive time) until stdin closes, and print them as JSON."""
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(math.ceil(streams / STREAMS_PER_CHANNEL))
    ]
    received: list[list[tuple[int, float]]] = [[] for _ in range(streams)]
    first = [asyncio.Event() for _ in range(streams)]

    async def watch(i: int) -> None:
        stub = contract_pb2_grpc.ContractServiceStub(channels[i // STREAMS_PER_CHANNEL])
        call = stub.WatchContracts(pb.WatchContractsRequest(router_id=f"bench-{os.getpid()}-{i}"))
        async for msg in call:
            received[i].append((msg.revision, time.monotonic()))
            first[i].set()

    tasks = [asyncio.create_task(watch(i)) for i in range(streams)]
    await asyncio.gather(*(e.wait() for e in first))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(received), flush=True)
    for ch in channels:
        await ch.close()


# -- driver ----------------------------------------------------------------------------------


def _start_control_plane(store: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0", "--store", f"sqlite:{store}",
         "--http-listen", "off"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if m := re.search(r"listening on (\S+)", line):
            return proc, m.group(1)
    raise RuntimeError("control plane did not start")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def fanout(target: str, watchers: int, clients: int, updates: int, spacing_s: float) -> dict[str, float]:
    per_client = [watchers // clients + (1 if i < watchers % clients else 0) for i in range(clients)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--client", target, "--streams", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in per_client
        if n
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    acked: dict[int, float] = {}
    sent: dict[int, float] = {}
    with grpc.insecure_channel(target) as channel:
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        for i in range(updates):
            t_sent = time.monotonic()
            revision = stub.UpdateContract(_update_request(i)).contract.revision
            acked[revision], sent[revision] = time.monotonic(), t_sent
            time.sleep(spacing_s)
    time.sleep(min(2.0, 0.5 + watchers / 1000))
    latencies: list[float] = []
    from_send: list[float] = []
    missing = 0
    for p in procs:
        out, _ = p.communicate("", timeout=60)
        for stream in json.loads(out):
            for revision, t_ack in acked.items():
                got = [t for rev, t in stream if rev >= revision]
                if got:
                    latencies.append(max(0.0, min(got) - t_ack) * 1000)
                    from_send.append((min(got) - sent[revision]) * 1000)
                else:
                    missing += 1
    return {
        "p50": _percentile(latencies, 0.50),
        "p99": _percentile(latencies, 0.99),
        "max": max(latencies),
        "send_p50": _percentile(from_send, 0.50),
        "send_p99": _percentile(from_send, 0.99),
        "send_max": max(from_send),
        "deliveries": len(latencies),
        "missing": missing,
    }


def _rate(fn, duration_s: float, threads: int = 1) -> float:  # type: ignore[no-untyped-def]
    count = [0] * threads
    stop = time.monotonic() + duration_s

    def loop(k: int) -> None:
        while time.monotonic() < stop:
            fn(k, count[k])
            count[k] += 1

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    start = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(count) / (time.monotonic() - start)


def throughput(target: str, tmp: Path, duration_s: float) -> list[tuple[str, float]]:
    rows = []
    conn = sqlite3.connect(tmp / "raw.db", isolation_level=None, check_same_thread=False)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")

    def raw(_k: int, i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (str(i),))
        conn.execute("COMMIT")

    rows.append(("raw SQLite commit, 1 row (baseline)", _rate(raw, duration_s)))
    conn.close()
    with grpc.insecure_channel(target) as channel:
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        stub.UpdateContract(_update_request(0, "bench"))
        get = pb.GetContractRequest(scope="bench")
        rows.append(("GetContract, 1 client (memory)", _rate(lambda k, i: stub.GetContract(get), duration_s)))
        rows.append(
            (
                "UpdateContract, 1 client",
                _rate(lambda k, i: stub.UpdateContract(_update_request(i, "bench")), duration_s),
            )
        )
        rows.append(
            (
                "UpdateContract, 8 client threads",
                _rate(
                    lambda k, i: stub.UpdateContract(_update_request(i, f"bench-{k}")), duration_s, threads=8
                ),
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--watchers", type=int, action="append", help="N (repeatable); default 1, 100, 1000")
    parser.add_argument("--clients", type=int, default=4, help="client processes for the watch streams")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--spacing-ms", type=float, default=200.0, help="pause between updates")
    parser.add_argument("--duration-s", type=float, default=3.0, help="per throughput row")
    parser.add_argument("--client", metavar="TARGET", help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        import uvloop

        uvloop.run(_client(args.client, args.streams))
        return 0
    sizes = args.watchers or [1, 100, 1000]
    with tempfile.TemporaryDirectory(prefix="fleetplane-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        proc, target = _start_control_plane(tmp / "control.db")
        try:
            print(f"watch fan-out: {args.updates} updates every {args.spacing_ms:.0f} ms; latency = "
                  "UpdateContract returned -> watcher holds that revision or newer")  # fmt: skip
            print(f"{'':>17} {'from UpdateContract return':^28} {'from UpdateContract send':^28}")
            print(f"{'watchers':>8} {'clients':>7} {'p50 ms':>8} {'p99 ms':>9} {'max ms':>9} "
                  f"{'p50 ms':>8} {'p99 ms':>9} {'max ms':>9} {'p99/base':>9} {'target p99':>12} "
                  f"{'deliveries':>10}")  # fmt: skip
            base = None
            for n in sizes:
                clients = 1 if n == 1 else args.clients
                r = fanout(target, n, clients, args.updates, args.spacing_ms / 1000)
                base = base or r["send_p99"]  # the first size (N=1 by default) is the baseline
                target_ms = TARGETS_P99_MS.get(n)
                verdict = (
                    "-"
                    if target_ms is None
                    else f"<{target_ms:.0f} {'ok' if r['p99'] < target_ms else 'MISSED'}"
                )
                print(f"{n:>8} {clients:>7} {r['p50']:>8.2f} {r['p99']:>9.2f} {r['max']:>9.2f} "
                      f"{r['send_p50']:>8.2f} {r['send_p99']:>9.2f} {r['send_max']:>9.2f} "
                      f"{r['send_p99'] / base:>9.1f} {verdict:>12} {int(r['deliveries']):>10}"
                      + (f"  ({int(r['missing'])} never delivered)" if r["missing"] else ""),
                      flush=True)  # fmt: skip
            print()
            print(f"throughput ({args.duration_s:.0f} s per row; SQLite WAL, synchronous=FULL)")
            rows = throughput(target, tmp, args.duration_s)
            raw = rows[0][1]
            print(f"{'operation':<36} {'ops/s':>9} {'vs raw commit':>14}")
            for name, rate in rows:
                print(f"{name:<36} {rate:>9.0f} {rate / raw:>13.2f}x")
        finally:
            _stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
