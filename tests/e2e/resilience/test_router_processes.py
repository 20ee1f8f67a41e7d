"""``--processes 2``: one port, supervised children, graceful drain on SIGTERM (SPEC §1)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tests.fakes.chat_stream import open_stream, post_chat, read_events
from tests.fakes.engine_sim import ROOT, EngineSim
from tests.fakes.ports import free_port
from tests.fakes.process_tree import alive, children_of, wait_for
from tests.fakes.router import RouterProcess


def test_graceful_drain_finishes_in_flight_streams() -> None:
    """SIGTERM to the supervisor: streams in flight in both children complete, then everything exits 0."""
    with EngineSim("--decode-tokens-per-s", "40") as sim:
        router = RouterProcess("--processes", "2", "--worker", sim.url).start()
        try:
            assert wait_for(lambda: len(children_of(router.pid)) == 2, timeout_s=30)
            children = children_of(router.pid)
            # Each child must be listening before we count on SO_REUSEPORT spreading connections.
            assert wait_for(lambda: sum("router listening" in line for line in router.output) == 2, 40)
            streams = [open_stream(router.port, max_tokens=40) for _ in range(6)]  # ~1 s each
            for _, resp in streams:
                assert resp.status == 200
            os.kill(router.pid, signal.SIGTERM)
            with ThreadPoolExecutor(6) as pool:
                results = list(pool.map(lambda s: read_events(s[1]), streams))
            for events in results:
                assert events[-1] == b"data: [DONE]"
                assert len(events) > 40
            assert router.stop() == 0
            assert not any(alive(pid) for pid in children)
        finally:
            router.stop()


def test_crashed_child_is_restarted_and_port_keeps_serving() -> None:
    """A router child killed with SIGKILL is replaced; requests keep being answered on the same port."""
    with EngineSim() as sim:
        router = RouterProcess("--processes", "2", "--worker", sim.url).start()
        try:
            assert wait_for(lambda: len(children_of(router.pid)) == 2, timeout_s=30)
            # Both listening before the kill: a child killed while starting prints no line of its own.
            assert wait_for(lambda: sum("router listening" in line for line in router.output) == 2, 40)
            victim = children_of(router.pid)[0]
            os.kill(victim, signal.SIGKILL)
            assert wait_for(
                lambda: len(children_of(router.pid)) == 2 and victim not in children_of(router.pid),
                timeout_s=30,
            )
            assert wait_for(lambda: sum("router listening" in line for line in router.output) >= 3, 40)
            assert [post_chat(router.port)[0] for _ in range(20)] == [200] * 20
        finally:
            assert router.stop() == 0


def test_startup_error_in_children_exits_2() -> None:
    """A flag every child refuses makes the supervisor exit 2 instead of restarting forever."""
    port = free_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataplane",
            "--processes",
            "2",
            "--listen",
            f"127.0.0.1:{port}",
            "--worker",
            f"http://127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--worker" in proc.stderr
    time.sleep(0.1)


def test_busy_port_is_a_one_line_startup_error() -> None:
    """--processes 2 on a port another process holds: exit 2 with one line naming --listen."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "dataplane", "--processes", "2", "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--listen" in lines[0] and str(port) in lines[0]
