"""A process tree read from /proc (a supervisor's children, zombies left out, a process's resident
memory), and polling."""

from __future__ import annotations

import os
from typing import Any

from bench.loadgen import proc_stat
from tests.fakes.engine_sim import wait_until


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc), zombies left out."""
    out = []
    for entry in os.listdir("/proc"):
        fields = proc_stat(int(entry)) if entry.isdigit() else None
        if fields is not None and int(fields[1]) == pid and fields[0] != b"Z":
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != b"Z"


def wait_for(predicate: Any, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate()`` until true or the timeout; returns its last truthiness."""
    return wait_until(predicate, timeout_s, interval_s)


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (VmRSS in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")
