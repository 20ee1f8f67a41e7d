"""The supervisor with stand-in children: restart on crash, SIGTERM forwarded, exit 0, no orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.engine_sim import wait_until
from tests.fakes.process import ROOT

# A child that records its PID; the first to create the "crashed" marker (O_EXCL: exactly one
# of the children starting together, however they interleave) exits 3 (a crash); on SIGTERM
# a child "drains" for 0.3 s then exits 0. Like the router's main, it first follows its parent
# (die_with_parent).
CHILD = r"""
import os, signal, sys, time
from controlplane.envflags import die_with_parent
die_with_parent()
d = sys.argv[1]
open(os.path.join(d, str(os.getpid())), "w").close()
try:
    os.close(os.open(os.path.join(d, "crashed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
except FileExistsError:
    pass
else:
    sys.exit(3)
def stop(*_):
    time.sleep(0.3)
    open(os.path.join(d, f"drained-{os.getpid()}"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.05)
"""

SUPERVISOR = r"""
import asyncio, sys
from dataplane.router.process.supervisor import RestartBackoff, Supervisor
cmd = [sys.executable, "-c", sys.argv[1], sys.argv[2]]
sup = Supervisor(cmd, 2, grace_s=2.0, backoff=RestartBackoff(base_s=0.05))
code = asyncio.run(sup.run())
print("restarts", sup.restarts, flush=True)
sys.exit(code)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_crashed_child_restarted_and_sigterm_drains_all(tmp_path: Path) -> None:
    """One child crashes at start and is restarted; SIGTERM drains both and the supervisor exits 0."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, CHILD, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Three PIDs (the crashed child, its restart, the other) and the marker.
        assert wait_until(lambda: len(list(tmp_path.iterdir())) >= 4, timeout_s=10)
        time.sleep(0.2)
        pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
        alive = [p for p in pids if _alive(p)]
        assert len(alive) == 2
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "restarts 1" in out
        assert {p.name for p in tmp_path.iterdir() if p.name.startswith("drained-")} == {
            f"drained-{p}" for p in alive
        }
        assert not any(_alive(p) for p in alive)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """Children of a SIGKILLed supervisor get SIGTERM from the kernel: no orphans."""
    (tmp_path / "crashed").touch()  # no child crashes
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, CHILD, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: len(list(tmp_path.iterdir())) >= 3, timeout_s=10)  # the marker, 2 PIDs
        pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not any(_alive(p) for p in pids), timeout_s=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
