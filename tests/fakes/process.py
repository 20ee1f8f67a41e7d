"""A child process that announces its port on a "listening on" line; the base of the process fakes.

``EngineSim``, ``RouterProcess`` and ``ControlPlaneProcess`` all start ``python -m MODULE`` bound
to port 0, wait for the line naming the port it got, keep its output for diagnostics, and stop
it by PID (SIGTERM, then SIGKILL after a grace period). Subclasses say which module, which line
and where stderr goes; this class does the rest::

    class Thing(ListeningProcess):
        name = "thing"
        module = "thing"
        listening_re = re.compile(r"thing listening on (?P<url>http://(?P<host>\\S+):(?P<port>\\d+))")
        error = ThingError

``listening_re`` must have the named groups ``host`` and ``port``; ``url`` is read when present.
Used as ``with`` or ``async with`` (start and stop then run in a thread so the loop keeps serving).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

ROOT = Path(__file__).resolve().parents[2]


def has_flag(flags: list[str], flag: str) -> bool:
    """Whether ``flags`` set ``flag`` (as ``--flag value`` or ``--flag=value``)."""
    return any(f == flag or f.startswith(flag + "=") for f in flags)


class ListeningProcess:
    """``python -m {module} {args}`` as a child; ``host``/``port``/``pid`` once started."""

    name: ClassVar[str]
    """What error messages call the process."""
    module: ClassVar[str]
    """The module run with ``python -m``."""
    listening_re: ClassVar[re.Pattern[str]]
    """The stdout line that says it is ready (groups ``host``, ``port``, optional ``url``)."""
    error: ClassVar[type[RuntimeError]]
    """Raised when the process exits or prints no listening line in time."""
    stderr_to: ClassVar[int | None] = None
    """``None`` (inherit), ``subprocess.STDOUT`` (into ``output``) or ``PIPE`` (``log_lines``)."""
    output_lines: ClassVar[int] = 200
    """How many of the latest output lines are kept."""

    def __init__(
        self, *, env: dict[str, str] | None, startup_timeout_s: float, stop_timeout_s: float
    ) -> None:
        self._env = env
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=self.output_lines)
        self._stderr: deque[str] = deque(maxlen=self.output_lines)
        self.url = ""
        self.host = ""
        self.port = 0

    def _args(self) -> list[str]:
        """The flags after ``python -m MODULE``."""
        raise NotImplementedError

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", self.module, *self._args()]

    def _on_line(self, line: str) -> None:
        """Called for every stdout line (subclasses pick up further announcements here)."""

    def _diagnostics(self) -> str:
        """What a failed start reports besides the exit code."""
        return str(self.output)

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    @property
    def output(self) -> list[str]:
        """The stdout lines seen so far (with stderr when ``stderr_to`` is ``STDOUT``)."""
        return list(self._output)

    @property
    def log_lines(self) -> list[str]:
        """stderr lines seen so far when ``stderr_to`` is ``PIPE`` (the control plane's JSON log)."""
        return list(self._stderr)

    def start(self) -> Self:
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(
            self._argv(),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr_to,
            text=True,
        )
        found: list[re.Match[str]] = []
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(found, ready), daemon=True).start()
        if self.stderr_to == subprocess.PIPE:
            threading.Thread(target=self._drain_stderr, daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not found:
            self.stop()
            raise self.error(
                f"{self.name} {self._args()} did not start (exit {self.returncode}): {self._diagnostics()}"
            )
        match = found[0]
        self.host, self.port = match["host"], int(match["port"])
        if "url" in match.re.groupindex:
            self.url = match["url"]
        return self

    def _drain(self, found: list[re.Match[str]], ready: threading.Event) -> None:
        # Keep reading after the listening line so a chatty process never blocks on a full pipe.
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            self._output.append(line.rstrip("\n"))
            self._on_line(line)
            if not found and (m := self.listening_re.search(line)):
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

    def close(self) -> None:
        """Stop, and release whatever else the process used (subclasses add to this)."""
        self.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)
