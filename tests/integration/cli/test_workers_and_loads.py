"""`fleetplane workers` and `fleetplane loads` against an in-process control plane."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from controlplane.cli.main import main
from controlplane.load.wire import LoadStat
from tests.fakes.control_plane import ROOT
from tests.fakes.inproc_control_plane import running_control_plane
from tests.fakes.load_peers import Pub

WORKER = "http://127.0.0.1:9001"


async def fleetplane(*argv: str) -> tuple[int, str, str]:
    """Run the console script's main in a thread; (exit code, stdout, stderr)."""

    def call() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    return await asyncio.to_thread(call)


async def add_worker(cp: tuple[str, ...], load_endpoint: str) -> None:
    """``fleetplane workers add WORKER`` over HTTP/1.1 with one explicit load endpoint, model m."""
    await fleetplane(
        "workers", "add", WORKER, "--protocol", "http1", "--load-endpoint", load_endpoint, "--model", "m", *cp
    )


async def test_workers_add_list_remove(tmp_path: Path) -> None:
    """add registers with explicit endpoints, list shows it (table and JSON), remove deletes it."""
    async with running_control_plane(tmp_path) as plane:
        cp = ("--control-plane", str(plane.grpc_address))
        code, out, _ = await fleetplane(
            "workers", "add", WORKER, "--protocol", "h2c", "--load-endpoint", "tcp://*:7001",
            "--load-endpoint", "tcp://*:7002", "--model", "m", *cp,
        )  # fmt: skip
        assert code == 0 and "tcp://127.0.0.1:7001, tcp://127.0.0.1:7002 (explicit)" in out
        code, out, _ = await fleetplane("workers", "list", "--output", "json", *cp)
        (worker,) = json.loads(out)["workers"]
        assert worker["url"] == WORKER and worker["resolvedProtocol"] == "WORKER_PROTOCOL_H2C"
        assert worker["dpSize"] == 2 and worker["models"] == ["m"]
        code, out, _ = await fleetplane("workers", "remove", WORKER, *cp)
        assert code == 0 and "removed" in out
        code, out, _ = await fleetplane("workers", "list", *cp)
        assert out.strip() == "no workers registered"


async def test_workers_errors_exit_1_with_the_server_message(tmp_path: Path) -> None:
    """A refused URL and an unknown worker exit 1 and print the status and the field."""
    async with running_control_plane(tmp_path) as plane:
        cp = ("--control-plane", str(plane.grpc_address))
        code, _, err = await fleetplane("workers", "add", "ftp://x:1", "--model", "m", *cp)
        assert code == 1 and "INVALID_ARGUMENT: url: scheme must be http or h2c" in err
        code, _, err = await fleetplane("workers", "remove", WORKER, *cp)
        assert code == 1 and "NOT_FOUND" in err


async def test_loads_table_shows_freshness_and_kv_bar(tmp_path: Path) -> None:
    """`loads` prints one row per worker with counts, a KV bar and FRESH once frames arrive; an
    engine without SGLang 0.5.23's appended counts shows ``-`` for the limit and queued tokens."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = Pub(ctx)
    try:
        async with running_control_plane(tmp_path) as plane:
            cp = ("--control-plane", str(plane.grpc_address))
            await add_worker(cp, pub.endpoint)
            deadline = time.monotonic() + 5
            while True:
                pub.send(LoadStat(3, 2, 300, 1000, 0))
                _, out, _ = await fleetplane("loads", *cp)
                if out.splitlines()[1].split()[1] == "FRESH":
                    break
                assert time.monotonic() < deadline, out
                await asyncio.sleep(0.05)
            row = out.splitlines()[1].split()
            assert row[:6] == [WORKER, "FRESH", "3", "-", "2", "-"]
            assert "[###.......]" in out and "300/1000" in out
            # An 0.5.23 engine: the running limit, the queued prefill tokens and the prefill speed.
            deadline = time.monotonic() + 5
            while True:
                pub.send(LoadStat(3, 2, 300, 1000, 0, 700, 1000, 8, 30_000, 1_000_000))
                _, out, _ = await fleetplane("loads", *cp)
                row = out.splitlines()[1].split()
                if row[3] == "8":
                    break
                assert time.monotonic() < deadline, out
                await asyncio.sleep(0.05)
            assert row[:6] == [WORKER, "FRESH", "3", "8", "2", "700"] and "30000" in row
    finally:
        pub.close()
        ctx.destroy(linger=0)


# Sets SIGINT to the disposition named by argv[1] (kept across exec, as a shell's background job
# inherits SIG_IGN), then execs the rest of argv. Not a ``preexec_fn``: that is a real fork of this
# process, which runs gRPC threads, and such a fork can break the child before it execs.
_WITH_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, getattr(signal, sys.argv[1])); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "inherited-ignored"])
async def test_loads_watch_refreshes_until_ctrl_c(tmp_path: Path, sigint: signal.Handlers) -> None:
    """`loads --watch --output json` prints the full view first, then exits 0 on SIGINT, even when
    started with SIGINT ignored (`cmd &`): the CLI restores the default itself."""
    async with running_control_plane(tmp_path) as plane:
        cp = ("--control-plane", str(plane.grpc_address))
        await add_worker(cp, "tcp://127.0.0.1:9")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WITH_SIGINT, sigint.name,
            "-m", "controlplane.cli.main", "loads", "--watch", "--output", "json", *cp,
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
            first = json.loads(line)
            assert first["full"] is True and [w["url"] for w in first["workers"]] == [WORKER]
            proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
