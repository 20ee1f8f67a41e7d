"""Load ingest: control-plane CPU per 1000 frames and publish -> WatchLoads latency (SPEC §6, §7).

N simulated schedulers (one ZMQ PUB socket each, several per process, in ``--procs``
processes) each publish ``--rate`` frames/s. The consumers take the same frames in turn:

* baseline: a bare subscriber process, one ``zmq.asyncio`` task per socket doing only
  ``recv_multipart`` + ``decode_frame`` (sgl-router's task-per-socket design, nothing else);
* fleetplane: ``python -m controlplane`` with the N workers registered (explicit load
  endpoints), the full ingest (table, freshness, hub) and one WatchLoads client; once per
  ``--ingest`` entry, against the same publishers: ``zmtp`` (the product's ingest) and
  ``libzmq`` (the same control plane with libzmq SUB sockets read in batches,
  ``bench/libzmq_subscriber.py``: the same-run justification of the ZMTP one).

CPU is read from ``/proc`` (all threads, ``bench/loadgen.cpu_seconds``) over the same window
length. Latency: each frame carries a per-socket counter in ``num_tokens``; the publisher logs
each frame's send time (CLOCK_MONOTONIC, shared by processes), the watcher logs when each
counter (or a newer one of that worker) first appears in the stream; latency = seen - sent.

    .venv/bin/python bench/load_ingest.py                  # N = 100 and 1000, 8 s windows
    .venv/bin/python bench/load_ingest.py --workers 1000 --seconds 5
    .venv/bin/python bench/load_ingest.py --seconds 5 --ingest zmtp libzmq zmtp libzmq   # interleaved

After the window, the control plane's idle CPU: with every publisher connected but silent
("idle cores", after every rank went STALE) and with every publisher gone, each rank
reconnecting at the 2 s backoff cap ("no-pub cores"). Consumers run in a session of their
own (see ``spawn``).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

from bench.loadgen import cpu_seconds  # noqa: E402
from controlplane.load.wire import LoadStat, decode_frame, encode_frame  # noqa: E402
from controlplane.store.database import SqliteDatabase  # noqa: E402
from controlplane.store.workers import Protocol, SqliteWorkerRegistry, WorkerRecord  # noqa: E402
from controlplane.v1 import load_pb2, load_pb2_grpc  # noqa: E402

SLOTS = 10  # each process spreads its sockets over 10 sub-slots of the period
IDLE_S = 3.0  # idle CPU windows
# Where `python -m controlplane` runs from: another checkout (a `git archive` of an older
# commit) gives same-session before/after rows (--control-plane-tree).
CONTROL_PLANE_TREE = ROOT
CAPACITY = 1_000_000
# The control plane's ingest (--ingest): "zmtp" is the product's (controlplane/load/ingest/subscriber.py);
# "libzmq" swaps in the libzmq SUB variant read in batches (bench/libzmq_subscriber.py), same hub.
INGESTS = ("zmtp", "libzmq")
_LIBZMQ_MAIN = (
    "import sys; from bench import libzmq_subscriber as m; from controlplane.load import plane; "
    "plane.LoadSubscriber = m.LibzmqSubscriber; from controlplane.cli.main import main; "
    "sys.exit(main(['control', *sys.argv[1:]]))"
)


# -- roles run as child processes -----------------------------------------------------------


def publisher(count: int, rate: float, log_path: str) -> None:
    """Bind ``count`` PUB sockets, print their endpoints, publish until stdin says stop."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socks = []
    for _ in range(count):
        s = ctx.socket(zmq.PUB)
        s.setsockopt(zmq.SNDHWM, 8)
        s.setsockopt(zmq.LINGER, 0)
        s.bind("tcp://127.0.0.1:*")
        socks.append(s)
    endpoints = [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in socks]
    print(json.dumps(endpoints), flush=True)
    stop = threading.Event()
    paused = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "pause":  # stay bound and connected, send nothing (idle CPU)
                paused.set()
            elif line.strip() == "resume":  # the next consumer of the same run
                paused.clear()
            else:
                break
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    sent: list[list[float]] = [[] for _ in socks]
    groups = [list(range(i, count, SLOTS)) for i in range(SLOTS)]
    step = 1.0 / rate / SLOTS
    next_t = time.monotonic()
    k = 0
    while not stop.is_set():
        if paused.is_set():
            time.sleep(0.05)
            continue
        for i in groups[k % SLOTS]:
            n = len(sent[i])
            sent[i].append(time.monotonic())
            socks[i].send_multipart(encode_frame(n, LoadStat(n % 7, n % 3, n, CAPACITY, 0)), zmq.NOBLOCK)
        k += 1
        next_t += step
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    with open(log_path, "w") as f:
        json.dump(dict(zip(endpoints, sent, strict=True)), f)
    ctx.destroy(linger=0)
    print("done", flush=True)


def bare_subscriber(endpoints_path: str) -> None:
    """The baseline: a zmq.asyncio task per socket, recv + decode only; 'count' on stdin."""
    endpoints = json.loads(Path(endpoints_path).read_text())

    async def main() -> None:
        ctx = zmq.asyncio.Context()
        ctx.set(zmq.MAX_SOCKETS, 65536)
        counts = [0] * len(endpoints)

        async def consume(i: int, endpoint: str) -> None:
            s = ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SUBSCRIBE, b"load")
            s.connect(endpoint)
            while True:
                decode_frame(await s.recv_multipart())
                counts[i] += 1

        def answer() -> None:
            # On a thread: a saturated event loop must still answer (that is the measurement).
            for line in sys.stdin:
                if line.strip() == "count":
                    print(
                        json.dumps({"frames": sum(counts), "live": sum(1 for c in counts if c)}), flush=True
                    )
            os._exit(0)

        threading.Thread(target=answer, daemon=True).start()
        tasks = [asyncio.create_task(consume(i, e)) for i, e in enumerate(endpoints)]
        await asyncio.gather(*tasks)

    asyncio.run(main())


# -- the driver -----------------------------------------------------------------------------


@dataclass
class Row:
    consumer: str
    workers: int
    frames_per_s: float
    cpu_cores: float
    cpu_ms_per_1000: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    dropped: int = 0
    idle_cores: float | None = None  # publishers connected but silent
    gone_cores: float | None = None  # publishers gone: every rank reconnecting


def spawn(*args: str, own_session: bool = False, cwd: Path = ROOT) -> subprocess.Popen[str]:
    """A child process; consumers get a session of their own, as in production.

    With the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``),
    CPU is shared fairly between sessions first: in the bench's session a consumer would
    compete with its own publishers for that session's share, and on a busy machine be
    starved by them (seen: the control plane got 5 % of a core, runnable throughout). One
    publisher process gets a session too; several stay in the driver's (one share for all
    of them, not one each).
    """
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None if os.environ.get("BENCH_DEBUG") else subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=own_session,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_baseline(endpoints: list[str], seconds: float, tmp: Path) -> Row:
    path = tmp / "endpoints.json"
    path.write_text(json.dumps(endpoints))
    proc = spawn(__file__, "--role", "bare", "--endpoints", str(path), own_session=True)
    assert proc.stdin is not None and proc.stdout is not None

    def count() -> dict[str, int]:
        proc.stdin.write("count\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(proc.stdout.readline())  # type: ignore[union-attr,no-any-return]

    try:
        # Saturated, it may never hear from every socket: measure what it manages after 20 s.
        deadline = time.monotonic() + 20
        while count()["live"] < len(endpoints) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        f0, c0, t0 = count()["frames"], cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        f1, c1, t1 = count()["frames"], cpu_seconds(proc.pid), time.monotonic()
    finally:
        stop(proc)
    frames, cpu = f1 - f0, c1 - c0
    return Row(
        "baseline: task per socket",
        len(endpoints),
        frames / (t1 - t0),
        cpu / (t1 - t0),
        1000 * cpu / frames * 1000,
    )


async def preregister(db: Path, urls: list[str], endpoints: list[str]) -> None:
    """Write the registry before the control plane starts (it subscribes to what it finds).

    One transaction instead of one fsync'd RegisterWorker per worker: a thousand of those
    take tens of seconds on this machine's disk, and what is measured here is the ingest.
    """
    database = SqliteDatabase(db)
    await database.open()
    try:
        registry = await SqliteWorkerRegistry.open(database)
        await registry.put_many(
            [
                WorkerRecord(
                    url=u,
                    protocol=Protocol.HTTP1,
                    resolved_protocol=Protocol.HTTP1,
                    models=("m",),
                    load_endpoints=(e,),
                )
                for u, e in zip(urls, endpoints, strict=True)
            ]
        )
    finally:
        await database.close()


async def idle_cpu(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def tell(pubs: list[subprocess.Popen[str]], command: str) -> None:
    for p in pubs:
        assert p.stdin is not None
        p.stdin.write(command + "\n")
        p.stdin.flush()


async def measure_control_plane(
    endpoints: list[str],
    seconds: float,
    tmp: Path,
    pubs: list[subprocess.Popen[str]],
    ingest: str = "zmtp",
    last: bool = True,
    watchers: int = 1,
) -> tuple[Row, list[tuple[str, int, float]]]:
    """One control plane against the running publishers; ``last``: stop them after (no-pub CPU)."""
    urls = [f"http://127.0.0.1:{20000 + i}" for i in range(len(endpoints))]
    db = tmp / f"cp-{time.monotonic_ns()}.db"
    # A few through the API (the path an operator takes), the rest written beforehand.
    await preregister(db, urls[10:], endpoints[10:])
    main = ["-m", "controlplane"] if ingest == "zmtp" else ["-c", _LIBZMQ_MAIN]
    proc = spawn(
        *main,
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "off",
        "--store",
        f"sqlite:{db}",
        own_session=True,
        cwd=CONTROL_PLANE_TREE,
    )
    assert proc.stdout is not None
    seen: list[tuple[str, int, float]] = []
    transit: list[float] = []
    try:
        target = ""
        while not target:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("control plane exited")
            if m := re.search(r"control plane listening on (\S+:\d+)", line):
                target = m.group(1)
        async with grpc.aio.insecure_channel(target) as channel:
            stub = load_pb2_grpc.LoadServiceStub(channel)
            sem = asyncio.Semaphore(32)

            async def register(url: str, endpoint: str) -> None:
                async with sem:
                    await stub.RegisterWorker(
                        load_pb2.RegisterWorkerRequest(
                            url=url,
                            protocol=load_pb2.WORKER_PROTOCOL_HTTP1,
                            models=["m"],
                            load_endpoints=[endpoint],
                        )
                    )

            started = time.monotonic()
            await asyncio.gather(*(register(u, e) for u, e in zip(urls[:10], endpoints[:10], strict=True)))
            print(f"  registered 10 workers over gRPC in {time.monotonic() - started:.1f} s", file=sys.stderr)

            async def fresh() -> tuple[int, int]:
                loads = await stub.GetLoads(load_pb2.GetLoadsRequest())
                ok = sum(1 for w in loads.workers if w.freshness == load_pb2.FRESHNESS_FRESH)
                return ok, sum(r.frames_received for w in loads.workers for r in w.ranks)

            deadline = time.monotonic() + 60
            while (state := await fresh())[0] < len(urls):
                assert time.monotonic() < deadline, f"workers never all FRESH: {state}"
                if os.environ.get("BENCH_DEBUG"):
                    print(f"  waiting: {state[0]} FRESH, {state[1]} frames so far", file=sys.stderr)
                await asyncio.sleep(0.2)

            call = stub.WatchLoads(load_pb2.WatchLoadsRequest(router_id="bench"))

            async def watch() -> None:
                async for msg in call:
                    now = time.monotonic()
                    transit.append(time.time() - msg.time.ToNanoseconds() / 1e9)
                    for w in msg.workers:
                        seen.append((w.url, w.num_tokens, now))

            watcher = asyncio.create_task(watch())
            # More routers: streams read as raw bytes (counted, not parsed: the harness must
            # not starve the control plane of the machine's two cores).
            raw_watch = channel.unary_stream(
                "/controlplane.v1.LoadService/WatchLoads",
                request_serializer=load_pb2.WatchLoadsRequest.SerializeToString,
            )
            extra_calls = [
                raw_watch(load_pb2.WatchLoadsRequest(router_id=f"bench-{i}")) for i in range(watchers - 1)
            ]
            extra_bytes = [0]

            async def drain_raw(raw: Any) -> None:
                async for chunk in raw:
                    extra_bytes[0] += len(chunk)

            extras = [asyncio.create_task(drain_raw(c)) for c in extra_calls]
            await asyncio.sleep(1.0)
            if os.environ.get("BENCH_DEBUG"):
                print(f"  measuring (control plane pid {proc.pid})", file=sys.stderr)
            (_, f0), c0, t0 = await fresh(), cpu_seconds(proc.pid), time.monotonic()
            p0, d0 = sum(cpu_seconds(p.pid) for p in pubs), time.process_time()
            await asyncio.sleep(seconds)
            (_, f1), c1, t1 = await fresh(), cpu_seconds(proc.pid), time.monotonic()
            p1, d1 = sum(cpu_seconds(p.pid) for p in pubs), time.process_time()
            if os.environ.get("BENCH_DEBUG"):
                print(
                    f"  harness: publishers {(p1 - p0) / (t1 - t0):.3f} cores, "
                    f"driver + watcher {(d1 - d0) / (t1 - t0):.3f} cores, load average {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
            loads = await stub.GetLoads(load_pb2.GetLoadsRequest())
            dropped = sum(r.dropped_frames for w in loads.workers for r in w.ranks)
            # Idle: every publisher silent (after every rank went STALE, 3 s), then gone.
            tell(pubs, "pause")
            await asyncio.sleep(4.5)
            idle = await idle_cpu(proc.pid, IDLE_S)
            gone: float | None = None
            if last:
                tell(pubs, "stop")
                for p in pubs:
                    assert p.stdout is not None
                    await asyncio.to_thread(p.stdout.readline)  # "done": its send log is written
                await asyncio.sleep(3.0)  # reconnect backoff at its 2 s cap
                gone = await idle_cpu(proc.pid, IDLE_S)
            else:
                tell(pubs, "resume")
            call.cancel()
            watcher.cancel()
            for c in extra_calls:
                c.cancel()
            await asyncio.gather(watcher, *extras, return_exceptions=True)
            if os.environ.get("BENCH_DEBUG") and extras:
                print(f"  {watchers - 1} more watchers read {extra_bytes[0] / 1e6:.0f} MB", file=sys.stderr)
    finally:
        stop(proc)
    frames, cpu = f1 - f0, c1 - c0
    name = {"zmtp": "control plane, ZMTP", "libzmq": "control plane, libzmq SUB batched"}[ingest]
    row = Row(
        name
        + ("" if watchers == 1 else f" x{watchers} watchers")
        + ("" if CONTROL_PLANE_TREE == ROOT else f" @{CONTROL_PLANE_TREE.name}"),
        len(endpoints),
        frames / (t1 - t0),
        cpu / (t1 - t0),
        1000 * cpu / frames * 1000,
    )
    row.dropped = dropped
    row.idle_cores, row.gone_cores = idle, gone
    transit.sort()
    if transit and os.environ.get("BENCH_DEBUG"):
        print(
            f"  stream transit (built -> read) p50 {pct(transit, 0.5):.1f} ms p99 {pct(transit, 0.99):.1f} ms over {len(transit)} messages",
            file=sys.stderr,
        )
    # Keep observations of the window only (latency is computed against the send logs).
    window = [(u, n, t) for (u, n, t) in seen if t0 <= t <= t1]
    return row, window


def latencies(
    sends: dict[str, list[float]],
    url_of: dict[str, str],
    seen: list[tuple[str, int, float]],
    t0: float,
    t1: float,
) -> list[float]:
    """For every frame sent in [t0, t1 - 0.5]: first time its counter, or a newer one, was seen."""
    by_url: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for url, n, t in seen:
        counters, times = by_url[url]
        if not counters or n > counters[-1]:
            counters.append(n)
            times.append(t)
    out = []
    for endpoint, sent in sends.items():
        counters, times = by_url.get(url_of[endpoint], ([], []))
        for n, ts in enumerate(sent):
            if not t0 <= ts <= t1 - 0.5:
                continue
            i = bisect.bisect_left(counters, n)
            if i < len(counters):
                out.append(times[i] - ts)
    out.sort()
    return out


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def run_size(
    n: int, procs: int, rate: float, seconds: float, baseline: bool, ingests: list[str], watchers: int = 1
) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp_dir:
        tmp = Path(tmp_dir)
        per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
        pubs = [
            spawn(
                __file__,
                "--role",
                "publisher",
                "--count",
                str(k),
                "--rate",
                str(rate),
                "--log",
                str(tmp / f"pub{i}.json"),
                own_session=procs == 1,
            )
            for i, k in enumerate(per)
            if k
        ]
        try:
            endpoints: list[str] = []
            for p in pubs:
                assert p.stdout is not None
                endpoints += json.loads(p.stdout.readline())
            base = measure_baseline(endpoints, seconds, tmp) if baseline else None
            # Each ingest in turn against the same publishers (same run, interleaved if repeated).
            runs = [
                asyncio.run(
                    measure_control_plane(
                        endpoints, seconds, tmp, pubs, ingest, last=k == len(ingests) - 1, watchers=watchers
                    )
                )
                for k, ingest in enumerate(ingests)
            ]
        finally:
            for p in pubs:
                if p.poll() is None and p.stdin is not None:
                    p.stdin.write("stop\n")
                    p.stdin.flush()
            for p in pubs:
                assert p.stdout is not None
                p.stdout.readline()
                stop(p)
        sends: dict[str, list[float]] = {}
        for i in range(len(pubs)):
            sends.update(json.loads((tmp / f"pub{i}.json").read_text()))
    url_of = {e: f"http://127.0.0.1:{20000 + i}" for i, e in enumerate(endpoints)}
    for fp, seen in runs:
        t0 = min((t for _, _, t in seen), default=0.0)
        t1 = max((t for _, _, t in seen), default=0.0)
        if os.environ.get("BENCH_DEBUG"):
            published = sum(1 for sent in sends.values() for ts in sent if t0 <= ts <= t1)
            print(
                f"  published {published / max(t1 - t0, 1e-9):.0f} frames/s during the window",
                file=sys.stderr,
            )
        lat = latencies(sends, url_of, seen, t0, t1)
        if lat:
            fp.p50_ms, fp.p99_ms = pct(lat, 0.50), pct(lat, 0.99)
    rows = [fp for fp, _ in runs]
    return rows if base is None else [base, *rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--role", choices=("driver", "publisher", "bare"), default="driver")
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 1000])
    parser.add_argument(
        "--procs", type=int, default=1, help="publisher processes (one: a session of its own)"
    )
    parser.add_argument("--rate", type=float, default=20.0, help="frames/s per publisher socket")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per consumer")
    parser.add_argument("--no-baseline", action="store_true", help="measure the control plane only")
    parser.add_argument(
        "--ingest",
        choices=INGESTS,
        nargs="+",
        default=list(INGESTS),
        help="control-plane ingests, in turn against the same publishers (repeat to interleave)",
    )
    parser.add_argument(
        "--control-plane-tree",
        type=Path,
        default=ROOT,
        help="run the control plane from this checkout (e.g. a git archive of an older commit)",
    )
    parser.add_argument(
        "--watchers", type=int, default=1, help="WatchLoads streams (routers); latency is read on the first"
    )
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--log", default="")
    parser.add_argument("--endpoints", default="")
    args = parser.parse_args()
    if args.role == "publisher":
        publisher(args.count, args.rate, args.log)
        return
    if args.role == "bare":
        bare_subscriber(args.endpoints)
        return
    global CONTROL_PLANE_TREE
    CONTROL_PLANE_TREE = args.control_plane_tree.resolve()
    rows: list[Row] = []
    for n in args.workers:
        print(
            f"N = {n}: {args.procs} publisher processes, {args.rate:g} frames/s each socket", file=sys.stderr
        )
        rows += run_size(
            n, args.procs, args.rate, args.seconds, not args.no_baseline, args.ingest, args.watchers
        )
    print(
        f"{'consumer':<34} {'N':>5} {'frames/s':>9} {'cores':>6} {'CPU ms/1000 fr':>15} {'vs base':>8} {'p50 ms':>7} {'p99 ms':>7} {'dropped':>8}"
        f" {'idle cores':>10} {'no-pub cores':>12}"
    )
    # "vs base": against the baseline, or with --no-baseline the first control plane of that N.
    first: dict[int, Row] = {}
    for r in rows:
        base = first.setdefault(r.workers, r)
        ratio = r.cpu_ms_per_1000 / base.cpu_ms_per_1000
        p50 = "-" if r.p50_ms is None else f"{r.p50_ms:.1f}"
        p99 = "-" if r.p99_ms is None else f"{r.p99_ms:.1f}"
        print(
            f"{r.consumer:<34} {r.workers:>5} {r.frames_per_s:>9.0f} {r.cpu_cores:>6.3f} {r.cpu_ms_per_1000:>15.1f} "
            f"{ratio:>7.2f}x {p50:>7} {p99:>7} {r.dropped:>8}"
            f" {'-' if r.idle_cores is None else f'{r.idle_cores:.4f}':>10}"
            f" {'-' if r.gone_cores is None else f'{r.gone_cores:.4f}':>12}"
        )


if __name__ == "__main__":
    main()
