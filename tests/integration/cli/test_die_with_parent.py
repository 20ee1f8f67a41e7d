"""``FLEETPLANE_PARENT_PID``: a child started by ``up`` or the router's supervisor dies with it.

The child arms the parent-death signal itself after exec (``envflags.die_with_parent``), so the
parent starts it without a ``preexec_fn`` (a real fork of a gRPC process can abort the child).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from controlplane.envflags import PARENT_PID_ENV
from tests.fakes.engine_sim import wait_until
from tests.fakes.process import ROOT
from tests.fakes.process_tree import alive

CHILD = r"""
import os, sys, time
from controlplane.envflags import PARENT_PID_ENV, die_with_parent
die_with_parent()
print(os.getpid(), os.environ.get(PARENT_PID_ENV), flush=True)
time.sleep(30)
"""

# Starts CHILD naming itself as its parent, says the child's line, then waits to be killed.
PARENT = r"""
import os, subprocess, sys, time
env = dict(os.environ, FLEETPLANE_PARENT_PID=str(os.getpid()))
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env, stdout=subprocess.PIPE)
print(child.stdout.readline().decode().strip(), flush=True)
time.sleep(30)
"""


def test_a_child_dies_with_its_killed_parent_and_hides_the_variable_from_its_own_children() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD], cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    child_pid = 0
    try:
        assert parent.stdout is not None
        pid, inherited = parent.stdout.readline().decode().split()
        child_pid = int(pid)
        assert inherited == "None"  # what the child starts does not follow the child's parent
        assert alive(child_pid)
        parent.kill()  # SIGKILL: no handler of the parent runs
        parent.wait(10)
        assert wait_until(lambda: not alive(child_pid), timeout_s=10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child_pid and alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_stops_at_once() -> None:
    """Named parent not its parent (it died, the child was re-parented): SIGTERM before serving."""
    env = dict(os.environ, **{PARENT_PID_ENV: str(os.getpid() + 10_000_000)})
    child = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, timeout=20, check=False
    )
    assert child.returncode == -signal.SIGTERM
    assert child.stdout == b""


def test_without_the_variable_nothing_is_armed() -> None:
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID_ENV}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split()[1] == b"None"
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
