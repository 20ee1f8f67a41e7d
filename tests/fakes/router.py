"""Start ``python -m dataplane`` (``fleetplane router``) as a real process for tests.

Usage::

    with EngineSim() as sim, RouterProcess("--worker", sim.url) as router:
        urllib.request.urlopen(router.url + "/health")
        router.metrics()  # {"fleetplane_requests_total{code=\"200\",route=\"/health\"}": 1.0, ...}

The process listens on ``127.0.0.1:0`` unless the flags carry ``--listen``; the port is read
from its ``router listening on http://HOST:PORT`` stdout line. It is stopped by PID (SIGTERM,
then SIGKILL after a grace period) on exit from the ``with`` block; ``stop()`` returns the exit
code. ``async with`` works too (start and stop run in a thread).

Its rejection counts journal (``--router-id`` with ``--control-plane``) lives in ``journal_dir``
(its ``XDG_RUNTIME_DIR``): by default a directory of its own, removed on exit, so no test sees
another's counts; a restart test passes one directory to both processes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tests.fakes.process import ROOT as ROOT
from tests.fakes.process import ListeningProcess, has_flag

LISTENING_RE = re.compile(r"router listening on (?P<url>https?://(?P<host>\S+):(?P<port>\d+))")
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$")


class RouterProcessError(RuntimeError):
    """The router exited or printed no listening line in time."""


class RouterProcess(ListeningProcess):
    """A running router subprocess; ``url``/``host``/``port``/``pid`` once started."""

    name = "router"
    module = "dataplane"
    listening_re = LISTENING_RE
    error = RouterProcessError
    stderr_to = subprocess.STDOUT
    output_lines = 500

    def __init__(
        self,
        *flags: str,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 10.0,
        journal_dir: Path | str | None = None,
    ) -> None:
        self._own_journal_dir = None if journal_dir is not None else tempfile.mkdtemp(prefix="fleetplane-rt-")
        self.journal_dir = Path(journal_dir if journal_dir is not None else self._own_journal_dir or "")
        env = dict(os.environ if env is None else env)
        env["XDG_RUNTIME_DIR"] = str(self.journal_dir)
        super().__init__(env=env, startup_timeout_s=startup_timeout_s, stop_timeout_s=stop_timeout_s)
        self.flags = list(flags)
        if not has_flag(self.flags, "--listen"):
            self.flags = ["--listen", "127.0.0.1:0", *self.flags]

    def _args(self) -> list[str]:
        return self.flags

    def kill(self) -> None:
        """SIGKILL by PID (a crash: no shutdown code runs, no last report)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self._stop_timeout_s)

    def close(self) -> None:
        self.stop()
        if self._own_journal_dir is not None:
            shutil.rmtree(self._own_journal_dir, ignore_errors=True)

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
