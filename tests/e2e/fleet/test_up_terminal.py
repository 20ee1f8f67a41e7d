"""`fleetplane up` on a terminal, as a newcomer reads it (SPEC §1): the banner says where the logs are
and which PIDs run, its curl lines show what the router injected and what it refuses, and a live
one-line summary (requests/s, rejections, workers fresh) is redrawn in place while it runs."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.ports import free_port

pytestmark = pytest.mark.timeout(120)
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")


class Terminal:
    """`fleetplane up` with its stdout and stderr on a pseudo-terminal; everything it wrote so far."""

    def __init__(self, workdir: Path) -> None:
        self.router_port, self.control_port, self.http_port = free_port(), free_port(), free_port()
        primary, secondary = pty.openpty()
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "controlplane.cli.main", "up", "--workdir", str(workdir)),
                *("--router-port", str(self.router_port), "--control-port", str(self.control_port)),
                *("--http-port", str(self.http_port)),
            ],
            stdout=secondary,
            stderr=secondary,
            stdin=subprocess.DEVNULL,
        )
        os.close(secondary)
        self._fd = primary
        self.raw = b""

    def read_until(self, pattern: bytes, timeout_s: float = 60.0) -> bytes:
        """Read until the output (terminal codes removed) matches ``pattern``; that text."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if re.search(pattern, self.text()):
                return self.text()
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if ready:
                try:
                    self.raw += os.read(self._fd, 65536)
                except OSError:  # the other side closed: up exited
                    break
        raise AssertionError(f"no {pattern!r} in:\n{self.text().decode(errors='replace')[-3000:]}")

    def text(self) -> bytes:
        return ANSI.sub(b"", self.raw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        while select.select([self._fd], [], [], 0.2)[0]:  # what it wrote while stopping
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.raw += chunk
        os.close(self._fd)
        return code


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def test_up_on_a_terminal_tells_logs_pids_injection_and_a_live_summary(tmp_path: Path) -> None:
    """The banner names the logs directory (its files exist) and each child's PID (the PIDs up
    started); its curl lines, run as written, show the injected fields and a refusal; the summary
    line shows both workers fresh and counts the refusal."""
    workdir = tmp_path / "fleet"
    up = Terminal(workdir)
    try:
        banner = up.read_until(rb"Ctrl-C stops everything").decode()
        logs = re.search(r"logs\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        assert Path(logs) == workdir.resolve() / "logs"
        for name in ("control", "engine-h1", "engine-h2c", "router"):
            assert (Path(logs) / f"{name}.log").is_file()
        pids = {int(p) for p in re.findall(r"pid (\d+)", banner)}
        assert pids == _children(up.proc.pid) and len(pids) == 4
        curls = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")]
        assert len(curls) == 3, banner
        up.read_until(rb"workers fresh 2/2")
        injected = subprocess.run(["bash", "-c", curls[1]], capture_output=True, text=True, timeout=20)
        # What engine-sim read: the seeded contract's values, injected by the router.
        assert re.search(
            r'x-sim-sampling-params: \{"temperature":1\.0,"top_p":0\.95,"top_k":40', injected.stdout
        )
        refused = subprocess.run(["bash", "-c", curls[2]], capture_output=True, text=True, timeout=20)
        assert '"code":"sampling_contract_violation"' in refused.stdout.replace(" ", "")
        up.read_until(rb"rejections 1 ")
        assert b"\r\x1b[K" in up.raw  # redrawn in place, not scrolled
        assert re.search(rb"\d+\.\d req/s", up.text())
    finally:
        code = up.stop()
    assert code == 0
    assert b"stopping" in up.text()
