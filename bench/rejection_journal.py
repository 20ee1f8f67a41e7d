"""What the rejection counts journal costs per rejected request (SPEC §6: counts survive SIGKILL).

    python bench/rejection_journal.py [--rejections 20000] [--rounds 7]

A router with a counts journal rewrites its record (one ``pwrite`` of its cumulative counts)
before each 400 goes out. Both rows drive the router's front door in one process on uvloop with
in-memory transports (as ``bench/router_instructions.py``): an HTTP/1.1 client connection sends
a 1 KiB chat request whose ``temperature`` violates the contract, reads the 400, sends the next.
``journal`` writes the record to a file on the machine's temp filesystem, ``none`` does not; the
rounds alternate and the medians are reported, as wall time and as process CPU (user + system:
the ``pwrite`` is system time, which an instruction count would miss). Also the record write
alone: one field counted, and a worst case of 50 counted (scope, field) pairs and 32 carried boots.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import chat_body, post  # noqa: E402
from bench.router_instructions import MemoryTransport  # noqa: E402

MODEL = "sim-model"
CONTRACT = '{"temperature": 0.7}'
REQUEST = post(
    "127.0.0.1",
    8000,
    "/v1/chat/completions",
    chat_body(MODEL, stream=False, size=1024, max_tokens=16).replace(
        b'"max_tokens"', b'"temperature":1.5,"max_tokens"'
    ),
)


async def _drive(n: int, journal_dir: str | None) -> tuple[float, float]:
    """(wall s, CPU s) for ``n`` rejections through the front door, with or without a journal."""
    from dataplane.http import ServerLimits
    from dataplane.http.context import ServerContext
    from dataplane.http.http1 import Http1Connection
    from dataplane.router.app import Router
    from dataplane.router.fleet.workers import WorkerSpec
    from dataplane.router.process.journal import CountsJournal
    from dataplane.router.settings import build_parser, settings_from_args

    loop = asyncio.get_running_loop()
    url = "http://127.0.0.1:9"
    args = ["--listen", "127.0.0.1:0", "--worker", url, "--override-sampling-params", CONTRACT]
    router = Router(settings_from_args(build_parser().parse_args(args)))
    router.state.apply_workers([WorkerSpec(url, "http1", (MODEL,))])
    journal = None
    if journal_dir is not None:
        journal = CountsJournal.open(os.path.join(journal_dir, "bench.counts"), "bench")
        assert journal is not None
        journal.start("boot")
        router.state.rejection_listener = journal.record
    done = loop.create_future()
    answered = 0
    client = Http1Connection(ServerContext(router.proxy.handle, ServerLimits(), loop))

    def on_answer(data: bytes) -> None:
        nonlocal answered
        if not data.startswith(b"HTTP/1.1 400 "):
            done.set_exception(RuntimeError(f"unexpected answer: {data[:300]!r}"))
            return
        answered += 1
        if answered >= n:
            done.set_result(None)
        else:
            loop.call_soon(client.data_received, REQUEST)

    client.connection_made(MemoryTransport(on_answer))  # type: ignore[arg-type]
    wall, cpu = time.perf_counter(), time.process_time()
    loop.call_soon(client.data_received, REQUEST)
    await done
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if journal is not None:
        journal.close()
    return wall, cpu


def _record_alone(n: int, journal_dir: str, keys: int, carried: int) -> float:
    """Wall µs of one ``CountsJournal.record`` with ``keys`` counted pairs and ``carried`` boots."""
    from dataplane.router.process.journal import BootCounts, CountsJournal, encode_record

    path = os.path.join(journal_dir, f"alone-{keys}-{carried}.counts")
    counts = {(f"scope-{i}", "temperature"): 1000 + i for i in range(keys)}
    boots = [BootCounts(f"boot-{i:02d}", dict(counts)) for i in range(carried)]
    with open(path, "wb") as f:
        f.write(encode_record("bench", boots))
    journal = CountsJournal.open(path, "bench")
    assert journal is not None and len(journal.predecessors) == carried
    journal.start("boot")
    started = time.perf_counter()
    for _ in range(n):
        journal.record(counts)
    elapsed = time.perf_counter() - started
    journal.close()
    return elapsed / n * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rejections", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import gc

    import uvloop

    gc.collect()
    gc.freeze()
    n = args.rejections
    rows: dict[str, list[tuple[float, float]]] = {"none": [], "journal": []}
    with tempfile.TemporaryDirectory() as tmp:
        uvloop.run(_drive(n // 10, tmp))  # warm-up: imports, caches
        for _ in range(args.rounds):
            rows["none"].append(uvloop.run(_drive(n, None)))
            rows["journal"].append(uvloop.run(_drive(n, tmp)))
        alone = {
            "1 field": _record_alone(n, tmp, 1, 0),
            "50 fields, 32 carried boots": _record_alone(n // 10, tmp, 50, 32),
        }
    print(f"rejection journal — {n} rejected 1 KiB chat requests per round, {args.rounds} rounds, medians")
    print(f"{'mode':<10}{'wall µs/rej':>14}{'CPU µs/rej':>14}")
    medians = {}
    for mode, values in rows.items():
        wall = statistics.median(v[0] for v in values) / n * 1e6
        cpu = statistics.median(v[1] for v in values) / n * 1e6
        medians[mode] = (wall, cpu)
        print(f"{mode:<10}{wall:>14.2f}{cpu:>14.2f}")
    extra_wall = medians["journal"][0] - medians["none"][0]
    extra_cpu = medians["journal"][1] - medians["none"][1]
    print(f"{'journal +':<10}{extra_wall:>14.2f}{extra_cpu:>14.2f}")
    for case, micros in alone.items():
        print(f"record alone, {case}: {micros:.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
