"""A real single-member ``etcd`` for tests, on free loopback ports with a temporary data dir.

::

    with EtcdServer(tmp_path) as etcd:   # skips the test when the etcd binary is absent
        etcd.url("prefix")               # "etcd://127.0.0.1:PORT/prefix" for --store
        etcd.stop(); etcd.start()        # same ports and data: a cluster outage and recovery

Stopped by PID (SIGTERM, then SIGKILL); CI installs ``etcd-server`` (.ci/run), so there the
tests run rather than skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

ETCD = shutil.which("etcd")
STARTUP_TIMEOUT_S = 20.0


def require_etcd() -> str:
    """The etcd binary, or skip: the Debian package ``etcd-server`` provides it."""
    if ETCD is None:
        pytest.skip("etcd binary not found (apt-get install etcd-server; .ci/run installs it)")
    return ETCD


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdServer:
    """One etcd member; ``client_port`` stays the same across ``stop``/``start``."""

    def __init__(self, data_root: Path) -> None:
        self.binary = require_etcd()
        self.data_dir = data_root / "etcd-data"
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = data_root / "etcd.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def url(self, prefix: str = "") -> str:
        """The ``--store`` value for this server and ``prefix``."""
        return f"etcd://{self.endpoint}/{prefix}" if prefix else f"etcd://{self.endpoint}"

    def start(self) -> Self:
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            self.binary,
            "--name=test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--log-level=error",
            "--logger=zap",
        ]
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with {self._proc.returncode}: {self._log.read_text()[-2000:]}"
                )
            if self._healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy in {STARTUP_TIMEOUT_S}s")

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after 5 s."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
