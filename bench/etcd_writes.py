"""Contract writes per second on the etcd store at 1, 8 and 16 concurrent writers (SPEC §6).

A private single-member etcd (``tests/fakes/etcd.py``: free loopback ports, a temporary data
dir, the machine's ``etcd`` binary). For each number of writers N, each writer updates its own
scope as fast as it can for ``--seconds``: through one ``EtcdStore`` (one control plane), and
through two stores on the same prefix (two control planes, N/2 writers each), and through N stores
with one writer each (N control planes: nothing to batch, every write contends on the store-wide
revision key with the others; the jittered retry's case). The baseline, same etcd, same
run: N writers each putting one key of their own in a loop (one etcd ``Put`` per write, nothing
compared), i.e. what etcd itself does at that concurrency.

    .venv/bin/python bench/etcd_writes.py                 # N = 1, 8, 16; 5 s per cell
    .venv/bin/python bench/etcd_writes.py --seconds 2 --writers 16

Columns: writes/s; the ratio to the baseline at the same N; p50/p99 latency of one write; how
many writes failed (UNAVAILABLE, e.g. "gave up": must be 0); and, for the store, the number of
etcd transactions per committed write (below 1: concurrent writers share one transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controlplane.contracts import parse_contract_json  # noqa: E402
from controlplane.errors import ControlPlaneError  # noqa: E402
from controlplane.settings import EtcdLocation, parse_store  # noqa: E402
from controlplane.store.etcd import EtcdStore  # noqa: E402
from controlplane.store.etcd_client import EtcdClient, put  # noqa: E402
from tests.fakes.etcd import EtcdServer  # noqa: E402

CONTRACT = parse_contract_json('{"temperature": 0.7, "top_k": {"min": 1, "max": 50, "default": 40}}')


@dataclass
class Cell:
    writes: int
    failures: int
    seconds: float
    latencies_s: list[float]
    txns: int = 0

    @property
    def rate(self) -> float:
        return self.writes / self.seconds


def _location(url: str) -> EtcdLocation:
    location = parse_store(url)
    assert isinstance(location, EtcdLocation)
    return location


async def _run(writers: list[Callable[[int], Awaitable[None]]], seconds: float) -> Cell:
    """Each writer called with 0, 1, 2... until ``seconds`` passed; counts and times every call."""
    latencies: list[float] = []
    failures = 0
    stop_at = time.monotonic() + seconds

    async def loop(write: Callable[[int], Awaitable[None]]) -> None:
        nonlocal failures
        i = 0
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                await write(i)
            except ControlPlaneError:
                failures += 1
                continue
            latencies.append(time.monotonic() - started)
            i += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(w) for w in writers))
    return Cell(len(latencies), failures, time.monotonic() - started, latencies)


class _CountingClient:
    """Counts the etcd transactions a store sends (one per commit attempt, batched or not)."""

    def __init__(self, client: EtcdClient) -> None:
        self.txns = 0
        original = client.txn

        async def txn(compare, success, failure=()):  # type: ignore[no-untyped-def]
            if compare:  # the reads are compare-less transactions; only commits compare
                self.txns += 1
            return await original(compare, success, failure)

        client.txn = txn  # type: ignore[method-assign]


async def baseline(url: str, n: int, seconds: float) -> Cell:
    client = EtcdClient(_location(url))
    await client.open()
    try:
        keys = [client.key("baseline", str(w)) for w in range(n)]

        def writer(key: bytes) -> Callable[[int], Awaitable[None]]:
            async def write(i: int) -> None:
                await client.txn((), [put(key, str(i).encode())])

            return write

        return await _run([writer(k) for k in keys], seconds)
    finally:
        await client.close()


async def stores(url: str, n: int, seconds: float, replicas: int) -> Cell:
    opened = [EtcdStore(_location(url)) for _ in range(replicas)]
    for store in opened:
        await store.open()
    counters = [_CountingClient(store.client) for store in opened]
    try:

        def writer(store: EtcdStore, scope: str) -> Callable[[int], Awaitable[None]]:
            async def write(i: int) -> None:
                await store.update(
                    scope, CONTRACT, expected_version=None, allow_missing=True, author="bench", comment=str(i)
                )

            return write

        cell = await _run([writer(opened[w % replicas], f"model-{w}") for w in range(n)], seconds)
        cell.txns = sum(c.txns for c in counters)
        return cell
    finally:
        for store in opened:
            await store.close()


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="*", default=[1, 8, 16])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-etcd-") as tmp, EtcdServer(Path(tmp)) as etcd:
        rows = []
        for n in args.writers:
            base = await baseline(etcd.url(f"b{n}-{uuid.uuid4().hex[:6]}"), n, args.seconds)
            one = await stores(etcd.url(f"s{n}-{uuid.uuid4().hex[:6]}"), n, args.seconds, 1)
            two = (
                await stores(etcd.url(f"d{n}-{uuid.uuid4().hex[:6]}"), n, args.seconds, 2) if n > 1 else None
            )
            each = (
                await stores(etcd.url(f"e{n}-{uuid.uuid4().hex[:6]}"), n, args.seconds, n) if n > 2 else None
            )
            rows.append((n, base, one, two, each))
        print("| writers | case | writes/s | vs baseline | p50 ms | p99 ms | failed | txns/write |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for n, base, one, two, each in rows:
            cases = [("baseline: one Put per write", base), ("1 store (one control plane)", one)]
            if two is not None:
                cases.append(("2 stores, one prefix (two control planes)", two))
            if each is not None:
                cases.append((f"{n} stores, one writer each ({n} control planes)", each))
            for name, cell in cases:
                ratio = f"{cell.rate / base.rate:.2f}x" if cell is not base else "1.00x"
                per_write = f"{cell.txns / cell.writes:.2f}" if cell.txns and cell.writes else "-"
                print(
                    f"| {n} | {name} | {cell.rate:.0f} | {ratio} | {_ms(cell.latencies_s, 0.5)} | "
                    f"{_ms(cell.latencies_s, 0.99)} | {cell.failures} | {per_write} |"
                )
        mean = statistics.fmean(r[1].rate for r in rows)
        print(f"\n(baseline mean {mean:.0f} puts/s over the cells; {args.seconds:g} s per cell)")


if __name__ == "__main__":
    asyncio.run(main())
