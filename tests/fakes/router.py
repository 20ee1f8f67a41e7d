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

import re
import subprocess
import urllib.error
import urllib.request

from tests.fakes.process import ROOT as ROOT
from tests.fakes.process import ListeningProcess, has_flag

LISTENING_RE = re.compile(r"router listening on (?P<url>http://(?P<host>\S+):(?P<port>\d+))")
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
    ) -> None:
        super().__init__(env=env, startup_timeout_s=startup_timeout_s, stop_timeout_s=stop_timeout_s)
        self.flags = list(flags)
        if not has_flag(self.flags, "--listen"):
            self.flags = ["--listen", "127.0.0.1:0", *self.flags]

    def _args(self) -> list[str]:
        return self.flags

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
