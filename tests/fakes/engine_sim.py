"""Start ``python -m dataplane.engine.sim`` (engine-sim) as a real process for tests.

Usage::

    with EngineSim("--dp-size", "2", "--http2") as sim:
        httpx_or_whatever.get(sim.url + "/health")

    # load publishing on ports nobody else uses (auto = KV port + dp_size, SPEC §7):
    with EngineSim("--dp-size", "2", "--load-publish-endpoint", "auto",
                   "--kv-events-endpoint", kv_endpoint_with_free_load_ports(2)) as sim:
        info = sim.get_json("/server_info")

The process listens on ``127.0.0.1:0`` unless the flags carry ``--listen``; the port is
read from its ``engine-sim listening on http://HOST:PORT`` stdout line. It is stopped
by PID (SIGTERM, then SIGKILL after a grace period) on exit from the ``with`` block.
``async with`` works too (start and stop run in a thread so the loop keeps serving).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LISTENING_RE = re.compile(r"engine-sim listening on (http://(\S+):(\d+))")


class EngineSimError(RuntimeError):
    """engine-sim exited or printed no listening line in time."""


class EngineSim:
    """A running engine-sim subprocess; ``url``/``host``/``port``/``pid`` once started."""

    def __init__(
        self,
        *flags: str,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 15.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.flags = list(flags)
        if not any(f == "--listen" or f.startswith("--listen=") for f in self.flags):
            self.flags = ["--listen", "127.0.0.1:0", *self.flags]
        # Tests want instant answers unless they ask for a decode rate (the CLI default is realistic).
        if not any(f.startswith("--decode-tokens-per-s") for f in self.flags):
            self.flags += ["--decode-tokens-per-s", "0"]
        self._env = env
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=200)
        self.url = ""
        self.host = ""
        self.port = 0

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    @property
    def output(self) -> list[str]:
        """The stdout lines seen so far (for diagnostics)."""
        return list(self._output)

    def start(self) -> EngineSim:
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.engine.sim", *self.flags],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        found: list[re.Match[str]] = []
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(found, ready), daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not found:
            self.stop()
            raise EngineSimError(
                f"engine-sim {self.flags} did not start (exit {self.returncode}): {self.output}"
            )
        self.url, self.host, self.port = found[0].group(1), found[0].group(2), int(found[0].group(3))
        return self

    def _drain(self, found: list[re.Match[str]], ready: threading.Event) -> None:
        # Keep reading after the listening line so a chatty process never blocks on a full pipe.
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._output.append(line.rstrip("\n"))
            if not found and (m := LISTENING_RE.search(line)):
                found.append(m)
                ready.set()
        ready.set()

    def stop(self) -> int | None:
        """SIGTERM by PID, SIGKILL after the grace period; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(self._stop_timeout_s)
        return proc.returncode

    def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET ``path`` over HTTP/1.1 and decode the JSON answer (``--http2`` sims speak both)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def __enter__(self) -> EngineSim:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EngineSim:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


def free_port_range(count: int, attempts: int = 50) -> int:
    """A base port P such that P..P+count-1 are free right now on every interface."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count - 1 > 65535:
            continue
        if all(_is_free(p) for p in range(base, base + count)):
            return base
    raise EngineSimError(f"no {count} consecutive free ports found")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def kv_endpoint_with_free_load_ports(dp_size: int) -> str:
    """A ``--kv-events-endpoint`` whose ``auto`` load range (KV port + dp_size, SPEC §7) is free.

    engine-sim advertises but does not bind the KV port itself, so only the load range matters.
    """
    base = free_port_range(dp_size)
    while base - dp_size < 1:
        base = free_port_range(dp_size)
    return f"tcp://*:{base - dp_size}"


def wait_until(predicate: Any, timeout_s: float = 5.0, interval_s: float = 0.01) -> bool:
    """Poll ``predicate()`` until true or the timeout; returns its last truthiness."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
