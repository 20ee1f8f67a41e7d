"""Run a control plane for tests as a subprocess: the real ``python -m controlplane``::

    with ControlPlaneProcess() as cp:              # --listen 127.0.0.1:0, SQLite in a temp dir
        channel = grpc.insecure_channel(cp.target) # "127.0.0.1:PORT"
        cp.http_url                                # "http://127.0.0.1:PORT" (/metrics, /healthz)
    with ControlPlaneProcess("--auth-tokens", path, store_path=db) as cp: ...
    cp.kill()                                      # SIGKILL by PID (crash tests); cp.restart()

In-process on the test's event loop (integration tests): ``tests.fakes.inproc_control_plane``.

The subprocess is stopped by PID (SIGTERM, then SIGKILL after a grace period) on exit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

from tests.fakes.process import ROOT as ROOT
from tests.fakes.process import ListeningProcess, has_flag

LISTENING_RE = re.compile(r"control plane listening on (?P<host>\S+):(?P<port>\d+)")


HTTP_RE = re.compile(r"control plane http on (\S+):(\d+)")


class ControlPlaneError(RuntimeError):
    """The control plane exited or printed no listening line in time."""


class ControlPlaneProcess(ListeningProcess):
    """``python -m controlplane`` as a child process; ``target``/``port``/``pid`` once started."""

    name = "control plane"
    module = "controlplane"
    listening_re = LISTENING_RE
    error = ControlPlaneError
    stderr_to = subprocess.PIPE

    def __init__(
        self,
        *flags: str,
        store_path: Path | str | None = None,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(env=env, startup_timeout_s=startup_timeout_s, stop_timeout_s=stop_timeout_s)
        self.flags = list(flags)
        self._tmp: str | None = None
        if store_path is None:
            self._tmp = tempfile.mkdtemp(prefix="fleetplane-cp-")
            store_path = Path(self._tmp) / "control.db"
        self.store_path = Path(store_path)
        self.http_url = ""

    def _args(self) -> list[str]:
        flags = list(self.flags)
        if not has_flag(flags, "--listen"):
            flags = ["--listen", "127.0.0.1:0", *flags]
        if not has_flag(flags, "--http-listen"):
            flags += ["--http-listen", "127.0.0.1:0"]
        if not has_flag(flags, "--store"):
            flags += ["--store", f"sqlite:{self.store_path}"]
        return flags

    def _on_line(self, line: str) -> None:
        if m := HTTP_RE.search(line):
            self.http_url = f"http://{m.group(1)}:{m.group(2)}"

    def _diagnostics(self) -> str:
        return f"{self.output} {self.log_lines[-5:]}"

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> Self:
        # A restart reads a fresh listening line; the old process's lines would name its port.
        self._output.clear()
        return super().start()

    def kill(self) -> None:
        """SIGKILL by PID (a crash: no shutdown code runs)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self._stop_timeout_s)

    def restart(self) -> Self:
        """Start again on the same store (after ``stop`` or ``kill``)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
