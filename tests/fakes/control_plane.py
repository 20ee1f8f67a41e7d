"""Run a control plane for tests: as a subprocess, or in-process on the running event loop.

Subprocess (e2e; the real ``python -m controlplane``)::

    with ControlPlaneProcess() as cp:              # --listen 127.0.0.1:0, SQLite in a temp dir
        channel = grpc.insecure_channel(cp.target) # "127.0.0.1:PORT"
        cp.http_url                                # "http://127.0.0.1:PORT" (/metrics, /healthz)
    with ControlPlaneProcess("--auth-tokens", path, store_path=db) as cp: ...
    cp.kill()                                      # SIGKILL by PID (crash tests); cp.restart()

In-process (integration; same event loop as the test)::

    async with running_control_plane(tmp_path, auth_tokens=str(path)) as plane:
        plane.grpc_address, plane.http_address, plane.store

The subprocess is stopped by PID (SIGTERM, then SIGKILL after a grace period) on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any

from controlplane.app import ControlPlane
from controlplane.settings import ControlSettings

ROOT = Path(__file__).resolve().parents[2]
LISTENING_RE = re.compile(r"control plane listening on (\S+):(\d+)")
HTTP_RE = re.compile(r"control plane http on (\S+):(\d+)")


class ControlPlaneError(RuntimeError):
    """The control plane exited or printed no listening line in time."""


class ControlPlaneProcess:
    """``python -m controlplane`` as a child process; ``target``/``port``/``pid`` once started."""

    def __init__(
        self,
        *flags: str,
        store_path: Path | str | None = None,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.flags = list(flags)
        self._tmp: str | None = None
        if store_path is None:
            self._tmp = tempfile.mkdtemp(prefix="fleetplane-cp-")
            store_path = Path(self._tmp) / "control.db"
        self.store_path = Path(store_path)
        self._env = env
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=200)
        self._stderr: deque[str] = deque(maxlen=200)
        self.host = ""
        self.port = 0
        self.http_url = ""

    def _argv(self) -> list[str]:
        flags = list(self.flags)
        if not any(f == "--listen" or f.startswith("--listen=") for f in flags):
            flags = ["--listen", "127.0.0.1:0", *flags]
        if not any(f == "--http-listen" or f.startswith("--http-listen=") for f in flags):
            flags += ["--http-listen", "127.0.0.1:0"]
        if not any(f == "--store" or f.startswith("--store=") for f in flags):
            flags += ["--store", f"sqlite:{self.store_path}"]
        return [sys.executable, "-m", "controlplane", *flags]

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    @property
    def output(self) -> list[str]:
        """stdout lines so far."""
        return list(self._output)

    @property
    def log_lines(self) -> list[str]:
        """stderr lines so far (structured log, JSON per line)."""
        return list(self._stderr)

    def start(self) -> ControlPlaneProcess:
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._output.clear()
        self._proc = subprocess.Popen(
            self._argv(),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        found: list[re.Match[str]] = []
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(found, ready), daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not found:
            self.stop()
            raise ControlPlaneError(
                f"control plane {self._argv()} did not start (exit {self.returncode}): "
                f"{self.output} {self.log_lines[-5:]}"
            )
        self.host, self.port = found[0].group(1), int(found[0].group(2))
        return self

    def _drain(self, found: list[re.Match[str]], ready: threading.Event) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            self._output.append(line.rstrip("\n"))
            if m := HTTP_RE.search(line):
                self.http_url = f"http://{m.group(1)}:{m.group(2)}"
            if not found and (m := LISTENING_RE.search(line)):
                found.append(m)
                ready.set()
        ready.set()

    def _drain_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        for line in proc.stderr:
            self._stderr.append(line.rstrip("\n"))

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

    def kill(self) -> None:
        """SIGKILL by PID (a crash: no shutdown code runs)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self._stop_timeout_s)

    def restart(self) -> ControlPlaneProcess:
        """Start again on the same store (after ``stop`` or ``kill``)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> ControlPlaneProcess:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> ControlPlaneProcess:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)


@contextlib.asynccontextmanager
async def running_control_plane(tmp_path: Path, **settings: Any) -> AsyncIterator[ControlPlane]:
    """An in-process control plane on 127.0.0.1:0 with its SQLite store under ``tmp_path``.

    ``settings`` are ``ControlSettings.build`` keywords (e.g. ``auth_tokens=...``).
    """
    settings.setdefault("listen", "127.0.0.1:0")
    settings.setdefault("store", f"sqlite:{tmp_path / 'control.db'}")
    settings.setdefault("http_listen", "127.0.0.1:0")
    async with ControlPlane(ControlSettings.build(**settings)) as plane:
        yield plane
