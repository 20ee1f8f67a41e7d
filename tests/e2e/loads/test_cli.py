"""`fleetplane workers add` / `fleetplane loads` and /metrics show what GetLoads shows (SPEC §1, §6, §8)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from google.protobuf import json_format

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ROOT, ControlPlaneProcess
from tests.fakes.load_publishers import (
    PUSH_INTERVAL_S,
    Publisher,
    Watcher,
    fake_url,
    metric,
    rank,
    register,
    until,
    view,
)


@contextmanager
def heartbeats(publishers: list[Publisher], running: list[int]) -> Iterator[None]:
    """Keep every rank FRESH (same values, next seq) while a slow CLI process runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.05):
            for p, r in zip(publishers, running, strict=True):
                p.send(running=r, waiting=1, tokens=10 * r, capacity=100)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


@contextmanager
def loads_watch(plane: ControlPlaneProcess, *flags: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """`fleetplane loads --watch FLAGS` running; on leaving, Ctrl-C, and its exit code in the list."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from controlplane.cli.main import main; sys.exit(main())",
            "loads",
            "--watch",
            *flags,
            "--control-plane",
            plane.target,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    code: list[int] = []
    try:
        yield proc, code
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code.append(proc.wait(10))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def watched_worker(stub: load_pb2_grpc.LoadServiceStub, pubs, running: int = 1) -> tuple[str, Publisher]:  # type: ignore[no-untyped-def]
    """A registered worker whose publisher has been heard saying ``running``."""
    url = fake_url()
    p = Publisher(*pubs())
    register(stub, url, [f"tcp://127.0.0.1:{p.port}"])
    p.join(lambda: rank(stub, url).num_running_reqs == running, running=running)
    return url, p


def table_row(text: str, url: str) -> dict[str, str]:
    """The row of ``url`` in an aligned CLI table, cut at the header columns."""
    header, *rows = text.splitlines()
    names = re.findall(r"\S+(?: \S+)*", header)
    starts = [header.index(name) for name in names]
    (row,) = [r for r in rows if r.startswith(url + " ")]
    ends = [*starts[1:], None]
    return {n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)}


def test_workers_add_then_loads_table_and_json_match_get_loads(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """A CLI-registered two-rank worker (one wildcard endpoint): the table and JSON carry GetLoads' numbers."""
    url = fake_url()
    r0, r1 = Publisher(*pubs(), dp_rank=0), Publisher(*pubs("*"), dp_rank=1)
    cp = ("--control-plane", plane.target)
    added = fleetplane(
        "workers",
        "add",
        url,
        "--protocol",
        "http1",
        "--model",
        "audit-model",
        "--load-endpoint",
        f"tcp://127.0.0.1:{r0.port}",
        "--load-endpoint",
        f"tcp://*:{r1.port}",
        *cp,
        "--output",
        "json",
    )
    assert added.returncode == 0, added.stderr
    worker = json.loads(added.stdout)["worker"]
    assert worker["loadEndpoints"] == [f"tcp://127.0.0.1:{r0.port}", f"tcp://127.0.0.1:{r1.port}"]
    assert worker["dpSize"] == 2 and worker["discovered"] is False
    r0.join(lambda: rank(stub, url, 0).frames_received > 0)
    r1.join(lambda: rank(stub, url, 1).frames_received > 0)
    # Rank 0: three frames lost; rank 1: one malformed frame, then a publisher restart.
    r0.seq += 3
    r0.send(running=2, waiting=1, tokens=20, capacity=100)
    r1.send_raw([b"load", r1.seq.to_bytes(8, "big"), b"\xc1"])
    r1.seq = 0
    r1.send(running=5, waiting=1, tokens=50, capacity=100)
    until(lambda: rank(stub, url, 0).num_running_reqs == 2 and rank(stub, url, 1).num_running_reqs == 5)
    with heartbeats([r0, r1], [2, 5]):
        shown = fleetplane("loads", *cp)
        as_json = fleetplane("loads", *cp, "--output", "json")
        truth = view(stub, url)
    assert shown.returncode == 0 and as_json.returncode == 0, (shown.stderr, as_json.stderr)
    assert [(r.dropped_frames, r.malformed_frames, r.publisher_restarts) for r in truth.ranks] == [
        (3, 0, 0),
        (0, 1, 1),
    ]
    row = table_row(shown.stdout, url)
    assert row["FRESHNESS"] == "FRESH"
    assert (row["RUNNING"], row["WAITING"], row["KV TOKENS"], row["RANKS"]) == ("7", "2", "70/200", "2")
    assert (row["DROPPED"], row["RESTARTS"], row["MALFORMED"]) == ("3", "1", "1")
    assert row["KV CACHE"].endswith("35%")
    (listed,) = [w for w in json_format.Parse(as_json.stdout, pb.GetLoadsResponse()).workers if w.url == url]

    rank_fields = ("dp_rank", "endpoint", "num_running_reqs", "num_waiting_reqs", "num_tokens")
    rank_fields += ("max_total_num_tokens", "dropped_frames", "malformed_frames", "publisher_restarts")

    def stable(w: pb.WorkerLoad) -> tuple[object, ...]:
        """Everything but ages and seqs (the heartbeats move those between the two calls)."""
        ranks = [tuple(getattr(r, f) for f in (*rank_fields, "freshness")) for r in w.ranks]
        return (
            w.num_running_reqs,
            w.num_waiting_reqs,
            w.num_tokens,
            w.max_total_num_tokens,
            w.freshness,
            ranks,
        )

    assert stable(listed) == stable(truth)
    removed = fleetplane("workers", "remove", url, *cp)
    assert removed.returncode == 0, removed.stderr
    assert url not in fleetplane("loads", *cp).stdout


def test_loads_watch_json_streams_the_full_view_then_changes(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """`fleetplane loads --watch --output json`: one JSON line per message, full first; Ctrl-C exits 0."""
    url, p = watched_worker(stub, pubs)
    with loads_watch(plane, "--output", "json") as (proc, code):
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["full"] is True and url in [w["url"] for w in first["workers"]]
        for _ in range(100):  # until the watcher shows it (each frame is a change)
            p.send(running=42)
            time.sleep(PUSH_INTERVAL_S / 2)
            line = json.loads(proc.stdout.readline())
            assert not line.get("full", False)
            if any(w["url"] == url and w.get("numRunningReqs") == "42" for w in line.get("workers", [])):
                break
        else:
            raise AssertionError("the change never showed")
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
        while url not in json.loads(proc.stdout.readline()).get("removedUrls", []):
            pass
    assert code == [0], proc.stderr.read() if proc.stderr else ""


def watchers_gauge(plane: ControlPlaneProcess) -> float:
    return metric(plane, 'fleetplane_control_watchers{stream="loads"}')


def test_the_watchers_gauge_follows_open_streams(plane: ControlPlaneProcess, watch) -> None:  # type: ignore[no-untyped-def]
    """/metrics counts open WatchLoads streams (SPEC §8 watchers per stream) and forgets closed ones."""
    until(lambda: watchers_gauge(plane) == 0)
    opened: list[Watcher] = [watch(), watch()]
    until(lambda: all(w.messages for w in opened))
    assert watchers_gauge(plane) == 2
    for w in opened:
        w.call.cancel()
    until(lambda: watchers_gauge(plane) == 0)


def test_loads_watch_redraws_the_table_with_new_values(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """`fleetplane loads --watch` (table): each redraw shows the worker's newest numbers; Ctrl-C exits 0."""
    url, p = watched_worker(stub, pubs, running=3)
    screens: list[str] = []
    with loads_watch(plane) as (proc, code):
        assert proc.stdout is not None
        header = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("WORKER"):
                header = line
            elif header and line.startswith(url + " "):
                screens.append(header + line)
                if table_row(screens[-1], url)["RUNNING"] == "11":
                    break
                p.send(running=11, waiting=4, tokens=600, capacity=1000)  # redrawn at least once a second
        else:
            raise AssertionError(f"no redraw showed the new values: {screens[-3:]}")
    assert table_row(screens[0], url)["RUNNING"] == "3"
    row = table_row(screens[-1], url)
    assert (row["FRESHNESS"], row["WAITING"], row["KV TOKENS"], row["RANKS"]) == (
        "FRESH",
        "4",
        "600/1000",
        "1",
    )
    assert row["KV CACHE"].endswith("60%")
    assert code == [0]
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def test_the_freshness_gauge_counts_workers_fresh_then_stale(
    plane: ControlPlaneProcess, stub: load_pb2_grpc.LoadServiceStub, pubs
) -> None:  # type: ignore[no-untyped-def]
    """/metrics `fleetplane_load_workers{freshness}` counts a heard worker FRESH, then STALE once its
    publisher goes silent, and forgets it when it is removed (what the STALE alert reads)."""

    def count(state: str) -> float:
        return metric(plane, f'fleetplane_load_workers{{freshness="{state}"}}')

    stale_before = count("STALE")
    url, _publisher = watched_worker(stub, pubs)
    fresh = count("FRESH")
    assert fresh >= 1
    until(lambda: count("STALE") == stale_before + 1, timeout_s=10)  # no more frames
    assert count("FRESH") == fresh - 1
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
    until(lambda: count("STALE") == stale_before, timeout_s=10)
