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

import json
import re
import socket
import time
import urllib.request
from typing import Any

from tests.fakes.process import ROOT as ROOT
from tests.fakes.process import ListeningProcess, has_flag

LISTENING_RE = re.compile(r"engine-sim listening on (?P<url>http://(?P<host>\S+):(?P<port>\d+))")


class EngineSimError(RuntimeError):
    """engine-sim exited or printed no listening line in time."""


class EngineSim(ListeningProcess):
    """A running engine-sim subprocess; ``url``/``host``/``port``/``pid`` once started."""

    name = "engine-sim"
    module = "dataplane.engine.sim"
    listening_re = LISTENING_RE
    error = EngineSimError

    def __init__(
        self,
        *flags: str,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 15.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        super().__init__(env=env, startup_timeout_s=startup_timeout_s, stop_timeout_s=stop_timeout_s)
        self.flags = list(flags)
        if not has_flag(self.flags, "--listen"):
            self.flags = ["--listen", "127.0.0.1:0", *self.flags]
        # Tests want instant answers unless they ask for a decode rate (the CLI default is realistic).
        if not any(f.startswith("--decode-tokens-per-s") for f in self.flags):
            self.flags += ["--decode-tokens-per-s", "0"]

    def _args(self) -> list[str]:
        return self.flags

    def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET ``path`` over HTTP/1.1 and decode the JSON answer (``--http2`` sims speak both)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
            return json.loads(resp.read())


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
    """A ``--kv-events-endpoint`` whose KV ports and ``auto`` load range (KV port + dp_size, SPEC §7)
    are all free: engine-sim binds both (one port per dp rank each)."""
    return f"tcp://*:{free_port_range(2 * dp_size)}"


def wait_until(predicate: Any, timeout_s: float = 5.0, interval_s: float = 0.01) -> bool:
    """Poll ``predicate()`` until true or the timeout; returns its last truthiness."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
