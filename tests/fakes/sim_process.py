"""engine-sim as a process started the way an engine integrator starts it (``python -m
dataplane.engine.sim`` or the ``fleetplane engine-sim`` console script), stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.process import ROOT


def until(check: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.01) -> bool:
    """Poll ``check`` until it holds or the deadline passes; the last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)


def port_free(port: int) -> bool:
    """Can a TCP listener bind ``port`` on every interface right now?"""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """A base P with P..P+count-1 all free (chosen from the kernel's ephemeral picks)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count - 1 <= 65535 and all(port_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


class Sim:
    """One ``engine-sim`` process: ``url``, ``port``, ``pid`` once it printed its listening line."""

    def __init__(self, *flags: str, listen: str = "127.0.0.1:0", console_script: bool = False) -> None:
        self.flags = ["--listen", listen, *flags]
        # ``fleetplane engine-sim`` (the console script; it execs, so the PID is the engine's)
        # or ``python -m dataplane.engine.sim``.
        self.program = (
            [str(Path(sys.executable).parent / "fleetplane"), "engine-sim"]
            if console_script
            else [sys.executable, "-m", "dataplane.engine.sim"]
        )
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in __exit__
        self._lines: list[str] = []

    def start(self, timeout_s: float = 20.0) -> Sim:
        self.proc = subprocess.Popen(
            [*self.program, *self.flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        got = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.append(line)
                if "listening on http://" in line:
                    got.set()
            got.set()

        threading.Thread(target=read, daemon=True).start()
        if not got.wait(timeout_s) or not self._lines or "listening on" not in self._lines[-1]:
            self.stop()
            raise RuntimeError(f"engine-sim did not start: {self._lines} {self.stderr()}")
        self.url = self._lines[-1].split("listening on ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def get(self, path: str) -> Any:
        import urllib.request

        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> Sim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._stderr.close()


def run_sim(*flags: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    """engine-sim expected to refuse its flags: run it to completion."""
    return subprocess.run(
        [sys.executable, "-m", "dataplane.engine.sim", "--listen", "127.0.0.1:0", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
