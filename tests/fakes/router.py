"""Start ``python -m dataplane`` (``fleetplane router``) as a real process for tests.

Usage::

    with EngineSim() as sim, RouterProcess("--worker", sim.url) as router:
        urllib.request.urlopen(router.url + "/health")
        router.metrics()  # {"fleetplane_requests_total{code=\"200\",route=\"/health\"}": 1.0, ...}

The process listens on ``127.0.0.1:0`` unless the flags carry ``--listen``; the port is read
from its ``router listening on http://HOST:PORT`` stdout line. It is stopped by PID (SIGTERM,
then SIGKILL after a grace period) on exit from the ``with`` block; ``stop()`` returns the exit
code. ``async with`` works too (start and stop run in a thread).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
LISTENING_RE = re.compile(r"router listening on (http://(\S+):(\d+))")
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$")


class RouterProcessError(RuntimeError):
    """The router exited or printed no listening line in time."""


class RouterProcess:
    """A running router subprocess; ``url``/``host``/``port``/``pid`` once started."""

    def __init__(
        self,
        *flags: str,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.flags = list(flags)
        if not any(f == "--listen" or f.startswith("--listen=") for f in self.flags):
            self.flags = ["--listen", "127.0.0.1:0", *self.flags]
        self._env = env
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=500)
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
        """stdout and stderr lines seen so far (for diagnostics)."""
        return list(self._output)

    def start(self) -> RouterProcess:
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane", *self.flags],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        found: list[re.Match[str]] = []
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(found, ready), daemon=True).start()
        if not ready.wait(self._startup_timeout_s) or not found:
            self.stop()
            raise RouterProcessError(
                f"router {self.flags} did not start (exit {self.returncode}): {self.output}"
            )
        self.url, self.host, self.port = found[0].group(1), found[0].group(2), int(found[0].group(3))
        return self

    def _drain(self, found: list[re.Match[str]], ready: threading.Event) -> None:
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

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
        """``GET path`` over HTTP/1.1: (status, lower-cased headers, body), errors included."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()

    def metrics(self) -> dict[str, float]:
        """``GET /metrics`` parsed into ``{series: value}`` (series exactly as printed)."""
        status, _, body = self.get("/metrics")
        assert status == 200
        return parse_metrics(body.decode())

    def __enter__(self) -> RouterProcess:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> RouterProcess:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> ``{name{labels}: value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def series(name: str, **labels: str) -> str:
    """The key ``parse_metrics`` uses for a series (prometheus-client prints labels sorted)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"
